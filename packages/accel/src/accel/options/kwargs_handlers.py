"""The kwargs handlers of Accelerate: small dataclasses that customise one object a run builds.

Each is given to `Accelerator(kwargs_handlers=[...])` at most once; `options.handlers` turns the
list into what the state, the precision policy and the backend are built with. As in Accelerate,
only the fields a user changed from the defaults are handed on (`to_kwargs`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from accel_state import CommHookOptions, DDPCommunicationHookType, KwargsHandler

_COMM_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments of `torch.nn.parallel.DistributedDataParallel`, and the communication hook to
    register on each model wrapped in it (`comm_hook`, optionally compressed by `comm_wrapper`,
    with `comm_state_option` for PowerSGD's state)."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Validates hook and wrapper now, where the user wrote them, and accepts their string values.
        options = self.comm_hook_options()
        self.comm_hook, self.comm_wrapper = options.hook, options.wrapper

    def to_dict(self) -> dict[str, Any]:
        """Return the DistributedDataParallel arguments (the hook fields are not among them)."""
        return {k: v for k, v in super().to_dict().items() if k not in _COMM_FIELDS}

    def comm_hook_options(self) -> CommHookOptions:
        """Return the hook settings in the form the backend registers them."""
        return CommHookOptions(self.comm_hook, self.comm_wrapper, dict(self.comm_state_option))


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Arguments of the fp16 loss scaler (`torch.amp.GradScaler`); ignored outside fp16."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Arguments of the process group's set-up: its torch.distributed `backend`, rendezvous
    `init_method` and collective `timeout`.

    Unlike Accelerate's, `timeout` stays None unless given: the run's timeout then comes from
    `ACCEL_TIMEOUT` or the 30-minute default. `backend` left at its default lets the device choose
    (nccl for GPUs, gloo for the CPU).
    """

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: datetime.timedelta | None = None


@dataclass
class AutocastKwargs(KwargsHandler):
    """Arguments of `torch.autocast` for the model's forward and `accelerator.autocast()`;
    `enabled=False` runs both in full precision under a mixed-precision run."""

    enabled: bool = True
    cache_enabled: bool | None = None


_ACTIVITIES = ("cpu", "cuda", "xpu", "mtia", "hpu")


@dataclass
class ProfileKwargs(KwargsHandler):
    """Arguments of `torch.profiler.profile` for `accelerator.profile()`.

    `activities` names what to record ("cpu", "cuda", "xpu", "mtia", "hpu"; default: what torch
    picks), `schedule_option` holds the arguments of `torch.profiler.schedule` (wait, warmup,
    active, repeat, skip_first). With `output_trace_dir`, each rank writes its Chrome trace there
    as `profile_<rank>.json`.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def _profiler_activity(self, activity: str) -> torch.profiler.ProfilerActivity:
        name = str(activity).lower()
        if name not in _ACTIVITIES or not hasattr(torch.profiler.ProfilerActivity, name.upper()):
            raise ValueError(f"ProfileKwargs: unknown activity {activity!r}; choose from {list(_ACTIVITIES)}")
        return getattr(torch.profiler.ProfilerActivity, name.upper())

    def build(self) -> torch.profiler.profile:
        """Return the `torch.profiler.profile` these settings describe (not started)."""
        activities = None
        if self.activities is not None:
            activities = [self._profiler_activity(activity) for activity in self.activities]
        schedule = (
            torch.profiler.schedule(**self.schedule_option) if self.schedule_option is not None else None
        )
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )
