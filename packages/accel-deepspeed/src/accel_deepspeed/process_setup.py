"""Sets a process up for DeepSpeed: device, torch process group, then DeepSpeed's comm layer on it.

accel's own rendezvous joins the group (per-attempt stores under elastic restarts, timeouts),
so DeepSpeed's `init_distributed` only wraps the group that exists. A script run with plain
`python` becomes a group of one, which DeepSpeed needs.
"""

from __future__ import annotations

import datetime
import os
import sys

import torch

from accel_state import env_vars
from accel_state.backend import ProcessGroupOptions, ProcessSetup
from accel_state.communication import TorchCommunicator
from accel_state.device import choose_device, choose_process_group_backend
from accel_state.distributed_type import DistributedType
from accel_state.launch_env import LaunchEnvironment
from accel_state.process_group import init_process_group, init_single_process_group


def setup_deepspeed_process(
    launch: LaunchEnvironment,
    *,
    cpu: bool,
    timeout: datetime.timedelta,
    process_group: ProcessGroupOptions | None = None,
) -> ProcessSetup:
    """Pick the device, join the process group, and start DeepSpeed's communication on it."""
    process_group = process_group or ProcessGroupOptions()
    device = choose_device(cpu, launch.local_rank)
    if device.type == "cpu":
        # DeepSpeed picks its accelerator once, at first use: tell it before it is imported.
        os.environ.setdefault(env_vars.DS_ACCELERATOR, "cpu")
    group_backend = choose_process_group_backend(device, process_group.backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if launch.is_distributed:
        init_process_group(launch, group_backend, timeout, process_group.init_method)
    else:
        init_single_process_group(group_backend, timeout)
    _start_deepspeed_comm(group_backend, timeout, on_cpu=device.type == "cpu")
    return ProcessSetup(DistributedType.DEEPSPEED, device, group_backend, TorchCommunicator())


def _start_deepspeed_comm(backend: str, timeout: datetime.timedelta, on_cpu: bool) -> None:
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
