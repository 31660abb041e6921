"""Test support for code that trains through an `Accelerator`: the gradient-accumulation step loop.

Unit tests and integration tests (on every launched rank) share this one loop instead of writing
`with accelerator.accumulate(model): ...` each time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import torch

from accel.accelerator import Accelerator


class Step(NamedTuple):
    """What one training step reports: its loss and whether it was a sync (optimizer) step."""

    loss: float
    sync_gradients: bool


def regression_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Return the mean squared error of `model` on an `(inputs, targets)` batch."""
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


def train_steps(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Any],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] = regression_loss,
    *,
    scheduler: Any = None,
    zero_grad_first: bool = False,
) -> list[Step]:
    """Train one step per batch inside `accelerator.accumulate(model)`; return what each step reported.

    A step is: loss, `accelerator.backward`, `optimizer.step()`, `scheduler.step()` (if given),
    then `optimizer.zero_grad()`, or `zero_grad()` before the loss with `zero_grad_first=True`.
    """
    steps = []
    for batch in batches:
        with accelerator.accumulate(model):
            if zero_grad_first:
                optimizer.zero_grad()
            loss = loss_fn(model, batch)
            accelerator.backward(loss)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            if not zero_grad_first:
                optimizer.zero_grad()
            steps.append(Step(loss.item(), accelerator.sync_gradients))
    return steps
