"""What accel's own code runs in a training step: the calls the loop makes through it, no more.

A step of a small model takes milliseconds, so every frame of accel's counts against the "own
work" target (`benchmarks/`); these pin the frames the plain and the accumulating loops run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator

_OUR_PACKAGES = ("accel", "accel_state", "accel_data", "accel_amp")


def _accel_calls(run: Callable[[], None]) -> list[str]:
    """Return the functions of accel's packages that `run` calls (or resumes), in order."""
    calls: list[str] = []

    def record(frame, event, arg):  # type: ignore[no-untyped-def]
        module = str(frame.f_globals.get("__name__", ""))
        if event == "call" and module.split(".")[0] in _OUR_PACKAGES:
            calls.append(frame.f_code.co_name)

    sys.setprofile(record)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("accumulation", [1, 4])
def test_a_step_runs_only_the_wrappers_the_loop_calls(accumulation):
    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=accumulation)
    model = torch.nn.Linear(4, 1)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.AdamW(model.parameters()), DataLoader(data, batch_size=4, shuffle=True)
    )
    batches = iter(loader)
    next(batches)  # the pass's start (drawing the shuffle) is not a step's

    def step() -> None:
        x, y = next(batches)
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()

    calls = [_accel_calls(step) for _ in range(accumulation)]  # a whole window: micro-steps and the sync step
    # The loader's batch; the accumulate decision, reading the gradient state's properties (and
    # off the sync step the backend's no_sync); backward, step, zero_grad. Nothing else of accel's.
    decision = ["sync_with_dataloader", "end_of_dataloader", "active_dataloader"]
    for index, made in enumerate(calls):
        off_sync = ["sync_each_batch", "no_sync"] if index < accumulation - 1 else []
        expected = ["__iter__", "accumulate", *decision, *off_sync, "backward", "step", "zero_grad"]
        assert made == expected, (index, made)
