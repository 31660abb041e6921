"""The context parallel region: a plain region without cp, one line for buffers that do not fit."""

from __future__ import annotations

import pytest
import torch

from accel_state.parallelism.config import ParallelismConfig, ParallelismConfigError
from accel_state.parallelism.context_parallel import context_parallel_region


@pytest.mark.parametrize("config", [None, ParallelismConfig(dp_shard_size=2, tp_size=2)])
def test_without_cp_the_region_leaves_the_buffers_whole(config):
    tokens = torch.arange(12).view(2, 6)
    with context_parallel_region(config, None, [tokens], [1], {tokens}):
        inside = tokens.clone()
    assert torch.equal(inside, torch.arange(12).view(2, 6))


def test_one_sequence_dimension_per_buffer():
    with pytest.raises(ParallelismConfigError, match="2 buffers but 1 buffer_seq_dims"):
        with context_parallel_region(None, None, [torch.zeros(2, 4), torch.zeros(2, 4)], [1]):
            pass


def test_a_sequence_dimension_the_buffer_lacks_is_named():
    with pytest.raises(ParallelismConfigError, match=r"buffer 0 has shape \(2, 4\), no dimension 2"):
        with context_parallel_region(None, None, [torch.zeros(2, 4)], [2]):
            pass
