"""Every shape of DataLoader survives prepare: workers, collate outputs, loader options."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from accel_data import prepare_data_loader

Pair = namedtuple("Pair", ["x", "label"])


@dataclasses.dataclass
class Example:
    x: torch.Tensor
    names: list


class Words(Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> dict:
        return {"x": torch.tensor([index, index]), "word": f"w{index}"}


def _collate_dataclass(items):
    return Example(torch.stack([i["x"] for i in items]), [i["word"] for i in items])


def _collate_namedtuple(items):
    return Pair(torch.stack([i["x"] for i in items]), [i["word"] for i in items])


def _shards(loader_factory, n=2):
    return [
        list(
            prepare_data_loader(
                loader_factory(),
                num_processes=n,
                process_index=r,
                put_on_device=True,
                use_seedable_sampler=True,
                data_seed=0,
            )
        )
        for r in range(n)
    ]


@pytest.mark.parametrize("collate", [None, _collate_dataclass, _collate_namedtuple])
def test_collate_outputs_keep_their_type_and_strings(collate):
    per_rank = _shards(lambda: DataLoader(Words(), batch_size=3, collate_fn=collate))
    first = per_rank[1][0]
    if collate is None:
        assert first["word"] == ["w3", "w4", "w5"] and first["x"][:, 0].tolist() == [3, 4, 5]
    elif collate is _collate_dataclass:
        assert isinstance(first, Example) and first.names == ["w3", "w4", "w5"]
    else:
        assert isinstance(first, Pair) and first.label == ["w3", "w4", "w5"]


@pytest.mark.slow
def test_worker_processes_and_persistent_workers_carry_over():
    def factory():
        return DataLoader(
            torch.arange(40), batch_size=4, shuffle=True, num_workers=2, persistent_workers=True
        )

    loader = prepare_data_loader(
        factory(), num_processes=2, process_index=0, use_seedable_sampler=True, data_seed=3
    )
    assert loader.num_workers == 2 and loader.persistent_workers
    other = prepare_data_loader(
        factory(), num_processes=2, process_index=1, use_seedable_sampler=True, data_seed=3
    )
    for _ in range(2):  # two epochs through the same persistent workers
        items = [i for b in loader for i in b.tolist()] + [i for b in other for i in b.tolist()]
        assert sorted(items) == list(range(40))


def test_loader_options_are_kept():
    raw = DataLoader(torch.arange(8), batch_size=2, pin_memory=True, timeout=5, drop_last=True)
    loader = prepare_data_loader(
        raw, num_processes=2, process_index=0, use_seedable_sampler=True, data_seed=0
    )
    assert loader.pin_memory and loader.timeout == 5
    assert loader.batch_sampler.drop_last


def test_custom_batch_sampler_is_dealt_round_robin():
    batches = [[0, 1, 2], [3], [4, 5], [6, 7, 8, 9]]
    per_rank = [
        [b.tolist() for b in prepare_data_loader(DataLoader(torch.arange(10), batch_sampler=batches),
                                                 num_processes=2, process_index=r, data_seed=0)]
        for r in range(2)
    ]  # fmt: skip
    assert per_rank == [[[0, 1, 2], [4, 5]], [[3], [6, 7, 8, 9]]]
