"""`AcceleratedOptimizer`: steps only on sync steps, and through the fp16 scaler when there is one."""

from __future__ import annotations

import math

import pytest
import torch

from accel_amp import AcceleratedOptimizer
from accel_state import GradientState


def _setup(optimizer_class=torch.optim.SGD, **kwargs):
    param = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    inner = optimizer_class([param], lr=0.1, **kwargs)
    return param, inner


def _backward(param, scaler=None):
    loss = (param * torch.tensor([3.0, 4.0])).sum()
    (scaler.scale(loss) if scaler is not None else loss).backward()


def test_step_and_zero_grad_on_sync_steps():
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner)
    _backward(param)
    optimizer.step()
    assert param.tolist() == pytest.approx([0.7, 1.6])
    assert optimizer.step_was_skipped is False
    optimizer.zero_grad()
    assert param.grad is None


def test_step_and_zero_grad_are_skipped_while_accumulating():
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner)
    _backward(param)
    GradientState()._set_sync_gradients(False)
    assert optimizer.step() is None
    optimizer.zero_grad()
    assert param.tolist() == [1.0, 2.0]
    assert param.grad.tolist() == [3.0, 4.0]
    GradientState()._set_sync_gradients(True)
    optimizer.step()
    assert param.tolist() == pytest.approx([0.7, 1.6])


def test_closure_is_passed_through():
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner)

    def closure():
        optimizer.zero_grad()
        _backward(param)
        return 1.5

    assert optimizer.step(closure) == 1.5
    assert param.tolist() == pytest.approx([0.7, 1.6])


def test_fp16_overflow_skips_the_step_and_leaves_weights_unchanged():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner, scaler=scaler)
    _backward(param, scaler)
    param.grad[0] = math.inf
    optimizer.step()
    assert optimizer.step_was_skipped is True
    assert param.tolist() == [1.0, 2.0]
    assert scaler.get_scale() < 1024.0


def test_fp16_normal_step_unscales_and_updates():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner, scaler=scaler)
    _backward(param, scaler)
    optimizer.step()
    assert optimizer.step_was_skipped is False
    assert param.tolist() == pytest.approx([0.7, 1.6])  # the step used unscaled gradients


def test_overflow_then_recovery():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner, scaler=scaler)
    _backward(param, scaler)
    param.grad[1] = math.nan
    optimizer.step()
    assert optimizer.step_was_skipped
    optimizer.zero_grad()
    _backward(param, scaler)
    optimizer.step()
    assert not optimizer.step_was_skipped
    assert param.tolist() == pytest.approx([0.7, 1.6])


def test_unscale_gradients_divides_once_per_step():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner, scaler=scaler)
    _backward(param, scaler)
    assert param.grad.tolist() == [3072.0, 4096.0]
    optimizer.unscale_gradients()
    optimizer.unscale_gradients()
    assert param.grad.tolist() == [3.0, 4.0]
    optimizer.step()
    assert param.tolist() == pytest.approx([0.7, 1.6])


def test_state_dict_round_trip():
    param, inner = _setup(torch.optim.Adam)
    optimizer = AcceleratedOptimizer(inner)
    _backward(param)
    optimizer.step()
    saved = optimizer.state_dict()
    other_param, other_inner = _setup(torch.optim.Adam)
    other = AcceleratedOptimizer(other_inner)
    other.load_state_dict(saved)
    restored = other.state[other_param]
    original = optimizer.state[param]
    assert torch.equal(restored["exp_avg"], original["exp_avg"])
    assert torch.equal(restored["exp_avg_sq"], original["exp_avg_sq"])
    assert int(restored["step"]) == 1


def test_param_groups_and_defaults_are_the_inner_optimizers():
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner)
    assert optimizer.param_groups is inner.param_groups
    optimizer.param_groups[0]["lr"] = 0.5
    assert inner.param_groups[0]["lr"] == 0.5
    assert optimizer.defaults is inner.defaults
    extra = torch.nn.Parameter(torch.zeros(1))
    optimizer.add_param_group({"params": [extra], "lr": 0.01})
    assert len(inner.param_groups) == 2
    assert isinstance(optimizer, torch.optim.Optimizer)
    assert "SGD" in repr(optimizer)


def test_lr_scheduler_on_the_wrapper_drives_the_inner_optimizer():
    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    _backward(param)
    optimizer.step()
    scheduler.step()
    assert inner.param_groups[0]["lr"] == pytest.approx(0.05)


class _CountingStepper:
    """A stepper that records its steps; `plain_steps` says whether the wrapper may bypass it."""

    def __init__(self, plain_steps: bool) -> None:
        self.plain_steps = plain_steps
        self.steps = 0

    def optimizer_step(self, optimizer, closure=None):
        self.steps += 1
        return optimizer.step(closure), True  # says "skipped" so that the test can tell it ran

    def unscale_gradients(self, optimizer) -> None:
        return None


@pytest.mark.parametrize("plain", [True, False])
def test_the_stepper_is_bypassed_only_when_its_step_is_plain(plain):
    param, inner = _setup()
    stepper = _CountingStepper(plain)
    optimizer = AcceleratedOptimizer(inner, stepper=stepper)
    _backward(param)
    closure_calls = []
    result = optimizer.step(lambda: closure_calls.append(1) or 5.0)
    assert param.tolist() == pytest.approx([0.7, 1.6])  # the step ran once either way
    assert result == 5.0 and closure_calls == [1]
    assert stepper.steps == (0 if plain else 1)
    assert optimizer.step_was_skipped is (not plain)


@pytest.mark.parametrize("plain", [True, False])
def test_every_real_step_is_the_hang_watchdogs_heartbeat_and_an_accumulation_step_is_not(plain):
    from accel_state.process_group import collective_log

    param, inner = _setup()
    optimizer = AcceleratedOptimizer(inner, stepper=_CountingStepper(plain))
    _backward(param)
    before = collective_log.progress
    optimizer.step()
    assert collective_log.progress == before + 1
    GradientState()._set_sync_gradients(False)
    try:
        optimizer.step()  # inside an accumulation window: no step, no progress
    finally:
        GradientState()._set_sync_gradients(True)
    assert collective_log.progress == before + 1


def test_a_loss_scaler_is_plain_only_without_a_scaler():
    from accel_amp.precision.loss_scaling import LossScaler

    assert LossScaler().plain_steps is True
    assert LossScaler(torch.amp.GradScaler("cpu")).plain_steps is False
