"""Device maps: filling the CPU budget then the disk, keeping blocks whole and tied weights together."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel_big_modeling import (
    BigModelingError,
    check_device_map,
    find_tied_parameters,
    get_balanced_memory,
    infer_auto_device_map,
    init_empty_weights,
)


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.first = nn.Linear(width, width)
        self.second = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.second(torch.relu(self.first(x)))


class Stack(nn.Module):
    def __init__(self, blocks: int = 6, width: int = 16, tie: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(blocks))
        self.head = nn.Linear(width, 10, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


BLOCK = (16 * 16 + 16) * 2 * 4  # 2176 bytes


def test_cpu_fills_to_its_budget_then_disk() -> None:
    with init_empty_weights():
        model = Stack()
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": 4 * BLOCK}, no_split_module_classes=["Block"]
    )
    devices = list(device_map.values())
    assert set(devices) == {"cpu", "disk"}
    assert devices.index("disk") > 0 and "cpu" not in devices[devices.index("disk") :]
    # The main device keeps room for the largest block: 4 budgets minus 1 reserved.
    cpu_bytes = sum(
        sum(p.numel() * 4 for n, p in model.named_parameters() if n.startswith(k + ".") or n == k)
        for k, v in device_map.items()
        if v == "cpu"
    )
    assert cpu_bytes <= 3 * BLOCK
    check_device_map(model, device_map)


def test_no_split_blocks_are_never_split() -> None:
    model = Stack()
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": int(2.5 * BLOCK)}, no_split_module_classes=["Block"], clean_result=False
    )
    assert not any(key.startswith("blocks.") and key.count(".") > 1 for key in device_map)
    split = infer_auto_device_map(model, max_memory={"cpu": int(2.5 * BLOCK)}, clean_result=False)
    assert any(key.count(".") > 1 for key in split)


def test_a_budget_below_one_block_names_the_block() -> None:
    model = Stack()
    with pytest.raises(BigModelingError, match=r"'blocks\.0' \(Block\) needs 2\.1 KiB") as error:
        infer_auto_device_map(model, max_memory={"cpu": 1000}, no_split_module_classes=["Block"])
    assert "max_memory['cpu'] = 1000 B" in str(error.value)


def test_tied_parameters_land_on_one_device() -> None:
    model = Stack(tie=True)
    assert find_tied_parameters(model) == [["embed.weight", "head.weight"]]
    for budget in (3 * BLOCK, 4 * BLOCK, 6 * BLOCK):
        device_map = infer_auto_device_map(
            model, max_memory={"cpu": budget}, no_split_module_classes=["Block"]
        )
        assert device_map.get("embed", device_map.get("")) == device_map.get("head", device_map.get(""))


def test_everything_fits_gives_one_entry() -> None:
    assert infer_auto_device_map(Stack(), max_memory={"cpu": "1GB"}) == {"": "cpu"}


def test_matches_accelerate_on_cpu_and_disk() -> None:
    accelerate_utils = pytest.importorskip("accelerate.utils", reason="Accelerate is only a reference here")
    model = Stack(blocks=8, tie=True)
    for budget in (3 * BLOCK, 5 * BLOCK, int(7.5 * BLOCK)):
        for no_split in (["Block"], None):
            ours = infer_auto_device_map(model, max_memory={"cpu": budget}, no_split_module_classes=no_split)
            theirs = accelerate_utils.infer_auto_device_map(
                model, max_memory={"cpu": budget}, no_split_module_classes=no_split
            )
            assert ours == dict(theirs), (budget, no_split)


def test_balanced_memory_without_gpus_keeps_the_budgets() -> None:
    assert get_balanced_memory(Stack(), max_memory={"cpu": "1MB"}) == {"cpu": 10**6}
