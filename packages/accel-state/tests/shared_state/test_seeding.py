"""`set_seed` makes python, numpy and torch draws repeatable; rng states round-trip."""

from __future__ import annotations

import random

import numpy as np
import torch

from accel_state import PartialState, get_rng_states, set_rng_states, set_seed


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_same_seed_same_draws():
    set_seed(1234)
    first = _draws()
    set_seed(1234)
    assert _draws() == first
    set_seed(1235)
    assert _draws() != first


def test_device_specific_seed_adds_the_process_index():
    state = PartialState()
    state.num_processes, state.process_index = 2, 1
    set_seed(10, device_specific=True)
    on_rank_one = _draws()
    set_seed(11)
    assert _draws() == on_rank_one


def test_rng_states_round_trip():
    set_seed(7)
    states = get_rng_states()
    assert {"python", "numpy", "torch"} <= set(states)
    expected = _draws()
    _draws()
    set_rng_states(states)
    assert _draws() == expected
