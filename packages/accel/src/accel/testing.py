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


def train_small_regression(
    accelerator: Accelerator, batch_size: int, *, epochs: int, zero_grad_first: bool = False
) -> tuple[torch.nn.Module, float]:
    """Train a fixed small MLP on fixed data (96 samples, shuffled, SGD with momentum) through
    `accelerator`; return the user's module and its final loss over the whole data.

    Runs that see the same samples per optimizer step (one process with batch 32, accumulation
    over 4 batches of 8, or 2 ranks with batch 4 and 4 steps) end with the same weights.
    """
    from torch.utils.data import DataLoader, TensorDataset

    from accel_state import set_seed

    set_seed(3)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        train_steps(accelerator, model, optimizer, loader, zero_grad_first=zero_grad_first)
    final_loss = regression_loss(model, (x.to(accelerator.device), y.to(accelerator.device))).item()
    return accelerator.unwrap_model(model), final_loss


def all_reduces_per_step(
    accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[Any]
) -> list[tuple[bool, int]]:
    """Train one step per batch (loss: the sum of the outputs) on a prepared DDP `model`; return,
    for each step, whether it was a sync step and how many gradient all-reduces it ran."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    calls: list[int] = []

    # DDP refuses a hook whose `bucket` annotation is anything but dist.GradBucket (a string here).
    def counting_hook(state, bucket):  # type: ignore[no-untyped-def]
        calls.append(1)
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting_hook)  # type: ignore[operator]
    per_step = []
    for batch in batches:
        before = len(calls)
        (step,) = train_steps(accelerator, model, optimizer, [batch], lambda model, x: model(x).sum())
        per_step.append((step.sync_gradients, len(calls) - before))
    return per_step


class Counter:
    """A registered checkpoint object: a number with `state_dict`/`load_state_dict`."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]
