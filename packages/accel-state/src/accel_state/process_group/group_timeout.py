"""Every process group made during the job waits as long as the job's own group.

torch gives a group made by `new_group`, `new_subgroups` or `split_group` the backend's default
timeout (30 minutes for gloo, 10 for NCCL) unless its caller passes one, and the code that makes
most of them passes none: DeepSpeed's data-parallel group (a clone of the world), the dimensions of
a DeviceMesh (FSDP2, HSDP, tensor and context parallelism), a user's `new_group`. A collective on
such a group ignored `Accelerator(timeout=...)` and `ACCEL_TIMEOUT`: measured, a ZeRO-2 job whose
rank 1 stalled between two steps left rank 0 in the engine's gradient all-reduce until the job was
killed, where the world group would have failed it after the 10 seconds asked for.

While a process group that accel created lives, torch's default for a group made without a
timeout is therefore the job's timeout. A timeout passed explicitly still wins, and a group that
accel adopted (made by another launcher, e.g. Ray Train) keeps torch's defaults.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

_original_default: Callable[[Any], datetime.timedelta] | None = None


def _c10d() -> Any:
    import torch.distributed.distributed_c10d as c10d

    return c10d


def apply_job_timeout(timeout: datetime.timedelta) -> None:
    """Make `timeout` the default of every group made from now on without one."""
    global _original_default
    c10d = _c10d()
    current = getattr(c10d, "_get_default_timeout", None)
    if current is None:  # a torch without the hook: groups keep torch's defaults
        return
    if _original_default is None:
        _original_default = current

    def job_timeout(backend: Any) -> datetime.timedelta:
        return timeout

    c10d._get_default_timeout = job_timeout


def restore_default_timeout() -> None:
    """Give torch its own default back (the job's group is gone)."""
    global _original_default
    if _original_default is not None:
        _c10d()._get_default_timeout = _original_default
        _original_default = None
