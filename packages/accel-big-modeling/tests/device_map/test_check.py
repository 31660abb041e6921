"""Checking a user's device map against the model."""

from __future__ import annotations

import pytest
from torch import nn

from accel_big_modeling import BigModelingError, check_device_map


def test_a_module_the_model_lacks_is_named() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    with pytest.raises(
        BigModelingError, match=r"device_map names 'decoder', which the model \(Sequential\) lacks"
    ):
        check_device_map(model, {"0": "cpu", "decoder": "disk"})


def test_a_parameter_without_device_is_named() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    with pytest.raises(BigModelingError, match=r"'1\.weight'"):
        check_device_map(model, {"0": "cpu"})


def test_a_full_map_passes() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    check_device_map(model, {"0": "cpu", "1.weight": "disk", "1.bias": "cpu"})
    check_device_map(model, {"": "cpu"})
