"""Clipping outside a step must not leave the fp16 scaler a stale "no inf found" verdict.

`clip_grad_*` after `optimizer.step()` unscales the old gradients and records that they were
finite; if a later overflowing backward did not void that record, the next step would skip the
inf check and write inf into the weights while reporting the step as taken.
"""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator


def _clip_norm(accelerator, model):
    accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)


def _clip_value(accelerator, model):
    accelerator.clip_grad_value_(model.parameters(), clip_value=1.0)


@pytest.mark.parametrize("clip", [_clip_norm, _clip_value], ids=["clip_grad_norm_", "clip_grad_value_"])
def test_overflow_after_a_clip_outside_the_step_is_skipped(clip):
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision="fp16")
    model = torch.nn.Linear(4, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4)
    for _ in range(30):  # the first steps overflow until the scaler has lowered its scale
        optimizer.zero_grad()
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        if not accelerator.optimizer_step_was_skipped:
            break
    assert not accelerator.optimizer_step_was_skipped
    clip(accelerator, model)  # after the step: unscales the old gradients
    optimizer.zero_grad()
    accelerator.backward(model(x).pow(2).mean())
    model.weight.grad[0, 0] = float("inf")  # this step's gradients overflow
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_clip_inside_the_step_still_unscales_only_once():
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision="fp16")
    model = torch.nn.Linear(4, 1, bias=False)
    reference = torch.nn.Linear(4, 1, bias=False)
    reference.load_state_dict(model.state_dict())
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4)
    accelerator.backward(model(x).pow(2).mean())
    accelerator.clip_grad_norm_(model.parameters(), max_norm=1e6)  # unscales, clips nothing
    optimizer.step()
    assert not accelerator.optimizer_step_was_skipped
    reference(x).pow(2).mean().backward()
    with torch.no_grad():
        reference.weight -= 0.1 * reference.weight.grad
    torch.testing.assert_close(model.weight, reference.weight, rtol=1e-3, atol=1e-4)
