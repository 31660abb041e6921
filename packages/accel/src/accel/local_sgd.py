"""`LocalSGD`: train each process on its own for a few steps, then average the weights."""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from accel.accelerator import Accelerator


class LocalSGD:
    """A context in which gradients are not all-reduced and, every `local_sgd_steps` calls of
    `step()` (and on leaving), the model's parameters are averaged across processes.

    ```python
    with LocalSGD(accelerator, model, local_sgd_steps=8) as local_sgd:
        for batch in loader:
            ...
            optimizer.step()
            local_sgd.step()
    ```
    It does nothing on one process or with `enabled=False`. Model-sharding set-ups (DeepSpeed,
    FSDP, Megatron-LM, XLA) are refused: their processes do not each hold the whole model.
    """

    def __init__(
        self, accelerator: Accelerator, model: torch.nn.Module, local_sgd_steps: int, enabled: bool = True
    ):
        # The backend says whether each process holds (and steps) the whole model itself.
        if not accelerator.backend.replicates_model:
            raise NotImplementedError(
                "LocalSGD runs where every process holds the whole model (plain or DDP runs), "
                f"not under {accelerator.distributed_type}"
            )
        if int(local_sgd_steps) < 1:
            raise ValueError(f"local_sgd_steps must be at least 1, got {local_sgd_steps!r}")
        self.enabled = enabled and accelerator.use_distributed
        self.num_steps = 0
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = int(local_sgd_steps)
        self._no_sync: contextlib.ExitStack | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = contextlib.ExitStack()
            self._no_sync.enter_context(self.accelerator.no_sync(self.model))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self.enabled or self._no_sync is None:
            return
        stack, self._no_sync = self._no_sync, None
        try:
            if exc_type is None:  # a failed rank would leave the others waiting in the average
                self._sync_and_avg_model_params()
        finally:
            stack.close()

    def step(self) -> None:
        """Count one optimizer step; on every `local_sgd_steps`-th, average the parameters."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_avg_model_params()

    def _sync_and_avg_model_params(self) -> None:
        self.accelerator.wait_for_everyone()
        parameters = [param for param in self.model.parameters()]
        with torch.no_grad():
            averaged = self.accelerator.reduce([param.data for param in parameters], reduction="mean")
            for param, mean in zip(parameters, averaged, strict=True):
                param.data.copy_(mean)
