"""The umbrella re-exports the split packages' objects themselves, never look-alikes."""

from __future__ import annotations

import accel
import accel_state
from accel import AcceleratorState, DistributedType, PartialState, set_seed
from accel.accelerator import Accelerator


def test_names_are_the_split_packages_objects():
    assert accel.DistributedType is accel_state.DistributedType is DistributedType
    assert PartialState is accel_state.PartialState
    assert AcceleratorState is accel_state.AcceleratorState
    assert accel.GradientState is accel_state.GradientState
    assert set_seed is accel_state.set_seed
    assert accel.Accelerator is Accelerator


def test_all_lists_the_public_names():
    assert {"Accelerator", "DistributedType", "PartialState", "AcceleratorState", "set_seed"} <= set(
        accel.__all__
    )
    assert all(hasattr(accel, name) for name in accel.__all__)
