"""Sets a process up for DeepSpeed: device, torch process group, then DeepSpeed's comm layer on it.

accel's own rendezvous joins the group (per-attempt stores under elastic restarts, timeouts),
so DeepSpeed's `init_distributed` only wraps the group that exists. A script run with plain
`python` becomes a group of one, which DeepSpeed needs.
"""

from __future__ import annotations

import datetime
import os
import sys

from accel_deepspeed.quiet_warnings import ignore_deepspeed_deprecations, use_current_collectives
from accel_state.backends.common import join_job
from accel_state.environment import env_vars
from accel_state.environment.distributed_type import DistributedType
from accel_state.seam.backend import ProcessRequest, ProcessSetup
from accel_state.seam.communication import TorchCommunicator


def setup_deepspeed_process(request: ProcessRequest) -> ProcessSetup:
    """Pick the device, join the process group (one of one for a lone process), and start
    DeepSpeed's communication on it."""
    device, group_backend = join_job(request, group_of_one=True)
    if device.type == "cpu":
        # DeepSpeed picks its accelerator once, at first use: tell it before it is imported.
        os.environ.setdefault(env_vars.DS_ACCELERATOR, "cpu")
    assert group_backend is not None  # group_of_one: there always is a group
    _start_deepspeed_comm(group_backend, request.timeout, on_cpu=device.type == "cpu")
    return ProcessSetup(DistributedType.DEEPSPEED, device, group_backend, TorchCommunicator())


def _start_deepspeed_comm(backend: str, timeout: datetime.timedelta, on_cpu: bool) -> None:
    ignore_deepspeed_deprecations()
    import deepspeed.comm.torch  # noqa: F401 - loaded to patch it before init_distributed runs

    if on_cpu:
        # DeepSpeed compiles a shared-memory all-reduce op for CPU (20-80 s) that training never
        # uses: gloo carries every collective here.
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed

    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=False,
        timeout=timeout,
        dist_init_required=False,
        verbose=False,
    )
    use_current_collectives()
