"""Dispatch and whole-model offload give the same outputs as the plain model."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accel_big_modeling import (
    BigModelingError,
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.norm(self.linear(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture
def net() -> nn.Module:
    torch.manual_seed(0)
    model = Net().eval()
    for block in model.blocks:  # non-trivial buffers
        block.norm.running_mean.uniform_()
    return model


IDS = torch.tensor([1, 2, 3, 4])


def _untied(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if k != "head.weight"}


def test_dispatch_with_cpu_and_disk(net: nn.Module, tmp_path: Path) -> None:
    expected = net(IDS)
    model = copy.deepcopy(net)
    device_map = {
        "embed": "cpu",
        "head": "cpu",
        "blocks.0": "cpu",
        "blocks.1": "disk",
        "blocks.2": "disk",
        "blocks.3": "cpu",
    }
    dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.hf_device_map == device_map
    assert model.blocks[1].linear.weight.is_meta and not model.blocks[0].linear.weight.is_meta
    assert torch.equal(model(IDS), expected)
    assert model.blocks[1].linear.weight.is_meta
    with pytest.raises(BigModelingError, match="cannot be moved"):
        model.to("cpu")


def test_dispatch_to_one_device_just_moves(net: nn.Module) -> None:
    model = dispatch_model(net, {"": "cpu"})
    assert model.hf_device_map == {"": "cpu"} and not hasattr(model, "_hf_hook")
    with pytest.raises(BigModelingError, match="disk_offload"):
        dispatch_model(net, {"": "disk"})


def test_dispatch_refuses_a_map_naming_a_missing_module(net: nn.Module, tmp_path: Path) -> None:
    with pytest.raises(BigModelingError, match="'blocks.9'"):
        dispatch_model(net, {"": "cpu", "blocks.9": "disk"}, offload_dir=tmp_path)
    assert not hasattr(net, "_hf_hook")


def test_cpu_offload_equal_outputs(net: nn.Module) -> None:
    expected = net(IDS)
    model = cpu_offload(copy.deepcopy(net), execution_device="cpu")
    assert model.blocks[0].linear.weight.is_meta
    assert torch.equal(model(IDS), expected)


def test_cpu_offload_with_hook_chain(net: nn.Module) -> None:
    expected = net(IDS)
    first, hook = cpu_offload_with_hook(copy.deepcopy(net), execution_device="cpu")
    second, second_hook = cpu_offload_with_hook(nn.Identity(), execution_device="cpu", prev_module_hook=hook)
    assert torch.equal(second(first(IDS)), expected)
    hook.remove()
    assert not hasattr(first, "_hf_hook")


def test_disk_offload_equal_outputs_and_reuse(net: nn.Module, tmp_path: Path) -> None:
    expected = net(IDS)
    model = disk_offload(copy.deepcopy(net), tmp_path, execution_device="cpu")
    assert model.blocks[0].linear.weight.is_meta
    assert torch.equal(model(IDS), expected)
    written = sorted(p.name for p in tmp_path.iterdir())
    again = disk_offload(copy.deepcopy(net), tmp_path, execution_device="cpu")
    assert torch.equal(again(IDS), expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == written


def test_load_checkpoint_and_dispatch_with_a_dict_map(net: nn.Module, tmp_path: Path) -> None:
    expected = net(IDS)
    save_file(_untied(net), tmp_path / "model.safetensors")
    with init_empty_weights():
        model = Net().eval()
    device_map = {"embed": "disk", "head": "disk", "blocks": "cpu"}
    load_checkpoint_and_dispatch(model, tmp_path, device_map=device_map, offload_folder=tmp_path / "offload")
    assert torch.equal(model(IDS), expected)


def test_load_checkpoint_and_dispatch_auto(net: nn.Module, tmp_path: Path) -> None:
    expected = net(IDS)
    save_file(_untied(net), tmp_path / "model.safetensors")  # a checkpoint keeps one of the tied names
    with init_empty_weights():
        model = Net().eval()
    load_checkpoint_and_dispatch(
        model,
        tmp_path / "model.safetensors",
        device_map="auto",
        max_memory={"cpu": 1000},
        no_split_module_classes=["Block"],
        offload_folder=tmp_path / "offload",
    )
    assert "disk" in model.hf_device_map.values() and "cpu" in model.hf_device_map.values()
    assert torch.equal(model(IDS), expected)


def test_unknown_device_map_string(net: nn.Module, tmp_path: Path) -> None:
    save_file(_untied(net), tmp_path / "model.safetensors")
    with pytest.raises(BigModelingError, match="'everywhere'"):
        load_checkpoint_and_dispatch(net, tmp_path, device_map="everywhere")
