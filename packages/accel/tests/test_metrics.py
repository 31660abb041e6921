"""`truncate_to_remainder`: what `gather_for_metrics` uses to drop the padding of the last batch."""

from __future__ import annotations

import torch

from accel.metrics import truncate_to_remainder


def test_unknown_remainder_keeps_everything():
    data = torch.arange(6)
    assert truncate_to_remainder(data, -1) is data


def test_tensors_are_cut_along_the_first_dimension():
    out = truncate_to_remainder({"logits": torch.ones(6, 2), "ids": [torch.arange(6)]}, 4)
    assert out["logits"].shape == (4, 2)
    assert out["ids"][0].tolist() == [0, 1, 2, 3]


def test_object_lists_are_cut():
    assert truncate_to_remainder(["a", "b", "c", "a"], 3) == ["a", "b", "c"]
