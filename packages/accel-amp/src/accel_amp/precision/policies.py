"""Precision policies: how a step computes (fp32, bf16 or fp16 autocast) and scales its loss.

A policy is handed to the backend as an object (it implements accel_state's `Precision`
protocol) and the backend calls it: for the forward's autocast, the loss scale, unscaling and the
optimizer step. Backends never branch on the mode.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from accel_amp.precision.loss_scaling import LossScaler
from accel_state import FullPrecision, recursively_apply

_ORIGINAL_FORWARD = "_accel_original_forward"
# Marks a model whose forward came from its class (nothing to restore on the instance).
_CLASS_FORWARD = "class"


_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in _HALF_DTYPES else tensor


def convert_to_fp32(data: Any) -> Any:
    """Return `data` with every fp16/bf16 tensor cast to fp32 (so losses are computed in full precision)."""
    if isinstance(data, torch.Tensor):  # a model's usual output: no walk through containers
        return _upcast(data)
    return recursively_apply(_upcast, data)


class _AutocastForward:
    """The forward of a wrapped model: the original under autocast, outputs cast back to fp32."""

    def __init__(
        self,
        function: Any,
        device_type: str,
        dtype: torch.dtype,
        autocast_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.function = function
        self.device_type = device_type
        self.dtype = dtype
        self.autocast_kwargs = dict(autocast_kwargs or {})
        functools.update_wrapper(self, function)

    def __call__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype, **self.autocast_kwargs):
            outputs = self.function(module, *args, **kwargs)
        if isinstance(outputs, torch.Tensor):  # `_upcast` inlined: this runs on every step
            return outputs.float() if outputs.dtype in _HALF_DTYPES else outputs
        return convert_to_fp32(outputs)


class PrecisionPolicy(FullPrecision):
    """Full precision: no autocast, no scaling. The base of the mixed policies."""

    mode = "no"
    autocast_dtype: torch.dtype | None = None
    scales_loss = False  # takes GradScaler arguments

    def __init__(
        self,
        device: torch.device,
        scaler: torch.amp.GradScaler | None = None,
        autocast_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """`autocast_kwargs` (`enabled`, `cache_enabled`: Accelerate's `AutocastKwargs`) apply to
        the model's forward and to `autocast()` alike."""
        self.device = torch.device(device)
        self.scaler = scaler
        self.loss_scaler = LossScaler(scaler)
        self.autocast_kwargs = dict(autocast_kwargs or {})

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        """Return the context that runs ops in this policy's low precision.

        Keyword arguments override the policy's own `autocast_kwargs` for this context.
        """
        settings = {**self.autocast_kwargs, **autocast_kwargs}
        enabled = enabled and settings.pop("enabled", True)
        if self.autocast_dtype is None or not enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype, **settings)

    def wrap_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make `model.forward` run under autocast and return fp32 outputs; idempotent."""
        if self.autocast_dtype is None or _ORIGINAL_FORWARD in model.__dict__:
            return model
        original = model.forward
        if isinstance(original, types.MethodType) and original.__self__ is model:
            function = original.__func__
        else:  # a plain callable set on the instance: call it as it is

            def function(_module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
                return original(*args, **kwargs)

        model.__dict__[_ORIGINAL_FORWARD] = model.__dict__.get("forward", _CLASS_FORWARD)
        # A method bound to the model (not a closure over it), so copy.deepcopy rebinds it to the copy.
        autocast_forward = _AutocastForward(
            function, self.device.type, self.autocast_dtype, self.autocast_kwargs
        )
        model.forward = types.MethodType(autocast_forward, model)
        return model

    @staticmethod
    def unwrap_forward(model: torch.nn.Module) -> torch.nn.Module:
        """Undo `wrap_forward`."""
        previous = model.__dict__.pop(_ORIGINAL_FORWARD, None)
        if previous is _CLASS_FORWARD:
            model.__dict__.pop("forward", None)
        elif previous is not None:
            model.forward = previous
        return model

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Return the loss to call backward on (scaled for fp16)."""
        return self.loss_scaler.scale_loss(loss)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide `optimizer`'s gradients by the loss scale, once per step (fp16 only)."""
        self.loss_scaler.unscale_gradients(optimizer)

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        """Step `optimizer` (through the scaler for fp16); return its result and whether it was skipped."""
        return self.loss_scaler.optimizer_step(optimizer, closure)


class Bf16Policy(PrecisionPolicy):
    """bf16 autocast; bf16 keeps fp32's range, so no loss scaling is needed."""

    mode = "bf16"
    autocast_dtype = torch.bfloat16


class Fp16Policy(PrecisionPolicy):
    """fp16 autocast with dynamic loss scaling, which keeps small gradients from flushing to zero."""

    mode = "fp16"
    autocast_dtype = torch.float16
    scales_loss = True

    def __init__(
        self, device: torch.device, autocast_kwargs: dict[str, Any] | None = None, **scaler_kwargs: Any
    ) -> None:
        """`scaler_kwargs` go to `torch.amp.GradScaler` (Accelerate's `GradScalerKwargs`)."""
        device = torch.device(device)
        super().__init__(device, torch.amp.GradScaler(device.type, **scaler_kwargs), autocast_kwargs)


_POLICIES: dict[str, type[PrecisionPolicy]] = {
    PrecisionPolicy.mode: PrecisionPolicy,
    Bf16Policy.mode: Bf16Policy,
    Fp16Policy.mode: Fp16Policy,
}


def precision_policy(
    mode: str,
    device: torch.device,
    *,
    autocast_kwargs: dict[str, Any] | None = None,
    scaler_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> PrecisionPolicy:
    """Return the policy object for mixed-precision `mode` ("no", "bf16" or "fp16").

    `autocast_kwargs` reach every policy's autocast; `scaler_kwargs` reach the loss scaler of a
    policy that scales (fp16) and are ignored by the others, as Accelerate ignores `GradScalerKwargs`
    outside fp16. Other keyword arguments go to the policy's class as they are.
    """
    try:
        policy_class = _POLICIES[mode]
    except KeyError:
        raise ValueError(f"mixed_precision {mode!r} is not one of {sorted(_POLICIES)}") from None
    if policy_class.scales_loss:
        kwargs = {**(scaler_kwargs or {}), **kwargs}
    return policy_class(device, autocast_kwargs=autocast_kwargs, **kwargs)
