"""`GradientState`: shared step flags and the active loader's end-of-data facts."""

from __future__ import annotations

from types import SimpleNamespace

from accel_state import GradientState


def test_defaults_and_shared_state():
    state = GradientState()
    assert state.sync_gradients is True
    assert state.num_steps == 1
    assert state.active_dataloader is None and not state.in_dataloader
    assert state.end_of_dataloader is False
    assert state.remainder == -1
    GradientState(gradient_accumulation_steps=4)
    assert state.num_steps == 4
    GradientState()._set_sync_gradients(False)
    assert state.sync_gradients is False


def test_innermost_active_loader_answers():
    state = GradientState()
    outer = SimpleNamespace(end_of_dataloader=False, remainder=3)
    inner = SimpleNamespace(end_of_dataloader=True, remainder=5)
    state._add_dataloader(outer)
    state._add_dataloader(inner)
    assert state.active_dataloader is inner
    assert (state.end_of_dataloader, state.remainder) == (True, 5)
    state._remove_dataloader(inner)
    assert (state.end_of_dataloader, state.remainder) == (False, 3)
    state._remove_dataloader(inner)  # removing twice is harmless
    state._remove_dataloader(outer)
    assert not state.in_dataloader


def test_reset_state_restores_defaults():
    GradientState(gradient_accumulation_steps=3)._set_sync_gradients(False)
    GradientState._reset_state()
    fresh = GradientState()
    assert (fresh.sync_gradients, fresh.num_steps) == (True, 1)
