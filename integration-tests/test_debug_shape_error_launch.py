"""In debug mode a collective over mismatched shapes raises an error naming each rank's shape."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def gather_mismatched_shapes():
    import torch

    from accel_state import CollectiveShapeError, PartialState, gather

    rank = PartialState().process_index
    try:
        gather(torch.zeros(2 + rank, 5))
    except CollectiveShapeError as error:
        return str(error)
    return "no error"


def test_mismatched_gather_names_each_rank_shape_launch():
    messages = run_on_ranks(gather_mismatched_shapes, 2, env={"ACCEL_DEBUG_MODE": "1"}, timeout=120)
    for message in messages:
        assert "gather" in message
        assert "rank 0: (2, 5), rank 1: (3, 5)" in message
