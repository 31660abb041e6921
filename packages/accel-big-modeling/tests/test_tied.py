"""Tied parameters are found as Accelerate reports them."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from accel_big_modeling import find_tied_parameters


def test_find_tied_parameters_as_accelerate_documents() -> None:
    model = nn.Sequential(OrderedDict([("linear1", nn.Linear(4, 4)), ("linear2", nn.Linear(4, 4))]))
    assert find_tied_parameters(model) == []
    model.linear2.weight = model.linear1.weight
    assert find_tied_parameters(model) == [["linear1.weight", "linear2.weight"]]


def test_three_names_one_group() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3))
    model[2].weight = model[0].weight
    model[1].weight = model[0].weight
    model[2].bias = model[1].bias
    assert find_tied_parameters(model) == [["0.weight", "1.weight", "2.weight"], ["1.bias", "2.bias"]]
