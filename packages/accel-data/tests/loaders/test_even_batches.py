"""`even_batches_overridden`: map-style loaders switch, others are left alone with a warning."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accel_data import even_batches_overridden, prepare_data_loader


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(5))


def _map_loader():
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=4)
    return prepare_data_loader(loader, num_processes=2, process_index=1)


def test_map_style_loaders_switch_inside_the_block_only():
    loader = _map_loader()
    assert loader.batch_sampler.even_batches
    with even_batches_overridden([loader], False):
        assert not loader.batch_sampler.even_batches
        assert [b[0].tolist() for b in loader] == [[4, 5, 6, 7]]
    assert loader.batch_sampler.even_batches


def test_iterable_loaders_are_left_alone_with_a_warning_naming_them():
    stream = prepare_data_loader(DataLoader(_Stream(), batch_size=2))
    loader = _map_loader()
    with pytest.warns(UserWarning, match="left alone: DataLoaderShard over _Stream"):
        with even_batches_overridden([stream, loader], False):
            assert not loader.batch_sampler.even_batches
            assert [b.tolist() for b in stream] == [[0, 1], [2, 3], [4]]
    assert loader.batch_sampler.even_batches
