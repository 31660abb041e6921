"""DDP communication hooks: compress or low-rank-approximate gradients before they are all-reduced.

The choice travels from the user's `DistributedDataParallelKwargs` to the backend as a
`CommHookOptions`; the backend registers the hook on each model it wraps in DDP.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


class DDPCommunicationHookType(str, enum.Enum):
    """The communication hooks (and wrappers) Accelerate offers; Accelerate's names and values."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"

    def __str__(self) -> str:
        return self.value


_POWER_SGD = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
_WRAPPERS = (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16)


def _hook_type(value: DDPCommunicationHookType | str, name: str) -> DDPCommunicationHookType:
    try:
        return DDPCommunicationHookType(str(value).lower())
    except ValueError:
        choices = ", ".join(member.value for member in DDPCommunicationHookType)
        raise ValueError(
            f"{name} {value!r} is not a DDP communication hook; choose one of {choices}"
        ) from None


@dataclass(frozen=True)
class CommHookOptions:
    """Which hook DDP runs on its gradient buckets, the compression wrapped around it, and the
    keyword arguments of PowerSGD's state (`matrix_approximation_rank`, `start_powerSGD_iter`...)."""

    hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    state_option: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hook", _hook_type(self.hook, "comm_hook"))
        wrapper = _hook_type(self.wrapper, "comm_wrapper")
        if wrapper not in _WRAPPERS:
            raise ValueError(f"comm_wrapper {wrapper.value!r} is not a wrapper; choose no, fp16 or bf16")
        object.__setattr__(self, "wrapper", wrapper)

    @property
    def enabled(self) -> bool:
        """Whether a communication hook other than `NO` is asked for."""
        return self.hook is not DDPCommunicationHookType.NO


def _hook_function(options: CommHookOptions) -> Callable[..., Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[DDPCommunicationHookType, Callable[..., Any]] = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers: dict[DDPCommunicationHookType, Callable[..., Any]] = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
    }
    hook = hooks[options.hook]
    wrapper = wrappers.get(options.wrapper)
    return wrapper(hook) if wrapper is not None else hook


def register_comm_hook(model: torch.nn.parallel.DistributedDataParallel, options: CommHookOptions) -> None:
    """Register the hook `options` names on the DDP `model` (nothing when it names none)."""
    if not options.enabled:
        return
    state: Any = None
    if options.hook in _POWER_SGD:
        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

        state = PowerSGDState(process_group=None, **dict(options.state_option))
    model.register_comm_hook(state=state, hook=_hook_function(options))
