"""Empty initialisation: parameters on meta (or a device), buffers only when asked."""

from __future__ import annotations

import torch
from torch import nn

from accel_big_modeling import init_empty_weights, init_on_device


def test_init_empty_weights_puts_parameters_on_meta_and_keeps_buffers() -> None:
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    assert all(p.is_meta for p in model.parameters())
    assert not model[1].running_mean.is_meta
    assert isinstance(model[0].weight, nn.Parameter) and model[0].weight.requires_grad
    assert not nn.Linear(2, 2).weight.is_meta  # patched only inside the block


def test_include_buffers_puts_buffers_on_meta_too() -> None:
    with init_empty_weights(include_buffers=True):
        model = nn.BatchNorm1d(4)
        made = torch.zeros(3)
    assert model.running_mean.is_meta and model.weight.is_meta and made.is_meta
    assert not torch.zeros(3).is_meta


def test_init_on_device() -> None:
    with init_on_device("meta"):
        linear = nn.Linear(3, 3)
    assert linear.weight.is_meta
    with init_on_device(torch.device("cpu")):
        linear = nn.Linear(3, 3)
    assert linear.weight.device.type == "cpu"
