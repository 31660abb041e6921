"""Memory sizes: parsing budgets, sizing modules from shapes, ordering budgets per device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel_big_modeling import (
    BigModelingError,
    compute_module_sizes,
    convert_file_size_to_int,
    dtype_byte_size,
    get_max_memory,
    init_empty_weights,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("48MiB", 48 * 2**20),
        ("2GB", 2 * 10**9),
        ("500KB", 500 * 10**3),
        ("1.5GiB", int(1.5 * 2**30)),
        ("10KiB", 10 * 1024),
        ("8Mb", 10**6),
        (1234, 1234),
    ],
)
def test_convert_file_size_to_int_follows_accelerate_units(text: int | str, expected: int) -> None:
    assert convert_file_size_to_int(text) == expected


@pytest.mark.parametrize("text", ["48 parsecs", "MiB", "", "-3MB", "twelveGB"])
def test_a_size_that_does_not_parse_is_named(text: str) -> None:
    with pytest.raises(BigModelingError, match="does not parse") as error:
        convert_file_size_to_int(text)
    assert repr(text) in str(error.value)
    assert "\n" not in str(error.value)


def test_dtype_byte_size() -> None:
    assert dtype_byte_size(torch.float32) == 4
    assert dtype_byte_size(torch.bfloat16) == 2
    assert dtype_byte_size(torch.bool) == 1 / 8


def _model() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 3), nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)))
    return model


def test_compute_module_sizes_counts_every_prefix() -> None:
    sizes = compute_module_sizes(_model())
    assert sizes["0.weight"] == 48 and sizes["0.bias"] == 12 and sizes["0"] == 60
    # BatchNorm: weight, bias, running mean/var (fp32) and num_batches_tracked (int64).
    assert sizes["1.1"] == 4 * 8 + 8
    assert sizes["1"] == (6 + 2) * 4 + sizes["1.1"]
    assert sizes[""] == sizes["0"] + sizes["1"]


def test_compute_module_sizes_with_dtype_shrinks_floats_only() -> None:
    sizes = compute_module_sizes(_model(), dtype=torch.float16, special_dtypes={"0.weight": "float64"})
    assert sizes["0.weight"] == 12 * 8
    assert sizes["0.bias"] == 3 * 2
    assert sizes["1.1.num_batches_tracked"] == 8


def test_compute_module_sizes_works_on_meta_models() -> None:
    with init_empty_weights():
        model = nn.Linear(1000, 1000)
    assert model.weight.is_meta
    assert compute_module_sizes(model)[""] == (1000 * 1000 + 1000) * 4


def test_get_max_memory_orders_devices_and_leaves_the_input_alone() -> None:
    budgets = {"disk": "1GB", "cpu": "48MiB", 1: 10, 0: "1KB"}
    assert list(get_max_memory(budgets).items()) == [(0, 1000), (1, 10), ("cpu", 48 * 2**20), ("disk", 10**9)]
    assert budgets == {"disk": "1GB", "cpu": "48MiB", 1: 10, 0: "1KB"}


def test_get_max_memory_names_a_bad_entry() -> None:
    with pytest.raises(BigModelingError, match=r"max_memory\['cpu'\].*'lots'"):
        get_max_memory({"cpu": "lots"})
    with pytest.raises(BigModelingError, match="'tpu'"):
        get_max_memory({"tpu": 10})


def test_get_max_memory_without_budget_reports_the_host() -> None:
    budgets = get_max_memory()
    assert budgets["cpu"] > 0
