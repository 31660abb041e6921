"""Signals a training loop sends across ranks: early-stopping triggers and forced gradient syncs."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from accel_state import AcceleratorState


class TrainingTriggers:
    """Mixin of the Accelerator: `self.state` and `self.backend` come from it."""

    state: AcceleratorState
    backend: Any
    _trigger_flag: torch.Tensor | None = None

    def set_trigger(self) -> None:
        """Raise this rank's flag; the next `check_trigger()` returns True on every rank.

        Any rank may call it (e.g. when its validation loss stops improving).
        """
        self._trigger_flag = torch.tensor(1, device=self.state.device)

    def check_trigger(self) -> bool:
        """Return True on every rank if any rank called `set_trigger()` since the last check, and
        lower the flag. Every rank must call it: it is a collective (a sum across ranks)."""
        flag = (
            self._trigger_flag
            if self._trigger_flag is not None
            else torch.tensor(0, device=self.state.device)
        )
        from accel_state.collectives import operations as collectives

        fired = bool(collectives.reduce(flag, reduction="sum").item() >= 1)
        if fired:
            self._trigger_flag = torch.tensor(0, device=self.state.device)
        return fired

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Return a context in which the next backward all-reduces `model`'s gradients, even when
        the forward ran inside `no_sync` or a non-sync `accumulate` step."""
        return self.backend.trigger_sync_in_backward(model)

    @staticmethod
    def verify_device_map(model: torch.nn.Module) -> bool:
        """Return True when `model` (or a submodule) was loaded with a device map spreading it over
        more than one device (big-model inference, `device_map="auto"`): such a model is not trained
        with data parallelism."""
        for module in model.modules():
            device_map = getattr(module, "hf_device_map", None)
            if isinstance(device_map, dict) and len({str(d) for d in device_map.values()}) > 1:
                return True
        return False
