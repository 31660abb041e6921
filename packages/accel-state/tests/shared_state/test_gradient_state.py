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
    state.register_loader(outer)
    state.register_loader(inner)
    assert state.active_dataloader is inner
    assert (state.end_of_dataloader, state.remainder) == (True, 5)
    state.unregister_loader(inner)
    assert (state.end_of_dataloader, state.remainder) == (False, 3)
    state.unregister_loader(inner)  # removing twice is harmless
    state.unregister_loader(outer)
    assert not state.in_dataloader


def test_accelerates_underscored_names_still_work():
    state = GradientState()
    loader = SimpleNamespace(end_of_dataloader=True, remainder=2)
    state._add_dataloader(loader)
    assert state.active_dataloader is loader
    state._remove_dataloader(loader)
    assert not state.in_dataloader
    state._set_sync_gradients(False)
    assert state.sync_gradients is False


def test_reset_state_restores_defaults():
    GradientState(gradient_accumulation_steps=3)._set_sync_gradients(False)
    GradientState._reset_state()
    fresh = GradientState()
    assert (fresh.sync_gradients, fresh.num_steps) == (True, 1)
