"""`AcceleratedScheduler` follows the optimizer's real steps."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from accel_amp import AcceleratedOptimizer, AcceleratedScheduler
from accel_state import GradientState, PartialState


def _optimizer():
    param = torch.nn.Parameter(torch.ones(1))
    return param, AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0))


def _scheduler(optimizer, **kwargs):
    inner = torch.optim.lr_scheduler.LambdaLR(optimizer.optimizer, lambda epoch: 0.5**epoch)
    optimizer.step()  # a (gradient-free) optimizer step first, as in a training loop
    return inner, AcceleratedScheduler(inner, [optimizer], **kwargs)


@pytest.mark.parametrize("split_batches", [False, True])
def test_steps_once_per_call_on_one_process(split_batches):
    _, optimizer = _optimizer()
    inner, scheduler = _scheduler(optimizer, split_batches=split_batches)
    scheduler.step()
    scheduler.step()
    assert inner.last_epoch == 2
    assert scheduler.get_last_lr() == [0.25]


def test_does_not_step_on_accumulation_steps():
    _, optimizer = _optimizer()
    inner, scheduler = _scheduler(optimizer)
    GradientState()._set_sync_gradients(False)
    scheduler.step()
    assert inner.last_epoch == 0
    GradientState()._set_sync_gradients(True)
    scheduler.step()
    assert inner.last_epoch == 1


def test_does_not_step_when_the_optimizer_step_was_skipped():
    scaler = torch.amp.GradScaler("cpu")
    param = torch.nn.Parameter(torch.ones(1))
    optimizer = AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0), scaler=scaler)
    inner = torch.optim.lr_scheduler.LambdaLR(optimizer.optimizer, lambda epoch: 0.5**epoch)
    scheduler = AcceleratedScheduler(inner, [optimizer])
    scaler.scale(param.sum()).backward()
    param.grad[0] = math.inf
    optimizer.step()
    assert optimizer.step_was_skipped
    scheduler.step()
    assert inner.last_epoch == 0


def test_step_with_optimizer_false_always_steps():
    _, optimizer = _optimizer()
    inner, scheduler = _scheduler(optimizer, step_with_optimizer=False)
    GradientState()._set_sync_gradients(False)
    scheduler.step()
    assert inner.last_epoch == 1


def test_without_split_batches_steps_once_per_process():
    # Posing as one of 2 processes: each step consumed 2 batches of the schedule's size.
    state = PartialState()
    state.num_processes = 2
    _, optimizer = _optimizer()
    inner, scheduler = _scheduler(optimizer)
    scheduler.step()
    assert inner.last_epoch == 2
    inner_split, split = _scheduler(optimizer, split_batches=True)
    split.step()
    assert inner_split.last_epoch == 1


def test_one_cycle_stops_at_its_total_steps():
    PartialState().num_processes = 2
    _, optimizer = _optimizer()
    inner = torch.optim.lr_scheduler.OneCycleLR(optimizer.optimizer, max_lr=1.0, total_steps=3)
    optimizer.step()
    scheduler = AcceleratedScheduler(inner, [optimizer])
    for _ in range(4):
        scheduler.step()
    assert inner.last_epoch == 3


def test_skipped_flag_of_any_optimizer_blocks_the_step():
    _, optimizer = _optimizer()
    inner = torch.optim.lr_scheduler.LambdaLR(optimizer.optimizer, lambda epoch: 1.0)
    scheduler = AcceleratedScheduler(inner, [optimizer, SimpleNamespace(step_was_skipped=True)])
    scheduler.step()
    assert inner.last_epoch == 0


def test_state_dict_and_attributes_are_delegated():
    _, optimizer = _optimizer()
    inner, scheduler = _scheduler(optimizer)
    scheduler.step()
    saved = scheduler.state_dict()
    _, other_optimizer = _optimizer()
    other_inner, other = _scheduler(other_optimizer)
    other.load_state_dict(saved)
    assert other.last_epoch == 1 == other_inner.last_epoch
    assert other.get_last_lr() == scheduler.get_last_lr()
    assert scheduler.base_lrs == [1.0]
    with pytest.raises(AttributeError):
        _ = scheduler.no_such_attribute
