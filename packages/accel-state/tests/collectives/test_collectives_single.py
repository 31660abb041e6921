"""Collectives on one process: each is the identity or its trivial result, and starts no group."""

from __future__ import annotations

import pytest
import torch

from accel_state import (
    PartialState,
    barrier,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)


def test_gather_returns_the_data_unchanged():
    data = {"a": torch.arange(3), "b": [torch.ones(2, 2)]}
    assert gather(data) is data
    scalar = torch.tensor(1.5)
    assert gather(scalar) is scalar


def test_gather_object_of_a_list_is_a_copy_of_the_list():
    items = [1, "two", {"three": 3}]
    gathered = gather_object(items)
    assert gathered == items
    assert gathered is not items


def test_gather_object_of_a_tuple_is_a_list():
    assert gather_object((1, 2)) == [1, 2]


def test_gather_object_of_a_non_list_wraps_it():
    assert gather_object({"k": 1}) == [{"k": 1}]
    assert gather_object("text") == ["text"]


def test_broadcast_is_the_identity():
    data = [torch.arange(4), {"x": torch.zeros(1)}]
    assert broadcast(data) is data
    assert broadcast(data, from_process=0) is data
    objects = ["a", 1]
    assert broadcast_object_list(objects) is objects
    assert objects == ["a", 1]


def test_barrier_and_wait_for_everyone_return():
    barrier()
    PartialState().wait_for_everyone()
    assert not PartialState().use_distributed


def test_reduce_sum_and_mean_on_one_process_are_copies():
    tensor = torch.tensor([1.0, 2.0])
    for reduction in ("sum", "mean", "none"):
        out = reduce(tensor, reduction=reduction)
        assert torch.equal(out, tensor)
        assert out.data_ptr() != tensor.data_ptr()


def test_reduce_applies_scale_to_every_tensor():
    out = reduce({"a": torch.tensor([1.0, 2.0]), "b": (torch.tensor(3.0),)}, reduction="mean", scale=0.5)
    assert out["a"].tolist() == [0.5, 1.0]
    assert isinstance(out["b"], tuple)
    assert out["b"][0].item() == 1.5


def test_reduce_max_and_min_on_one_process_are_detached_copies():
    tensor = torch.tensor([1.0, 2.0], requires_grad=True)
    for reduction in ("max", "min"):
        out = reduce(tensor, reduction=reduction)
        assert out.tolist() == [1.0, 2.0]
        assert not out.requires_grad


def test_reduce_rejects_an_unknown_reduction():
    with pytest.raises(ValueError, match="'product'"):
        reduce(torch.ones(1), reduction="product")


def test_reduce_rejects_non_tensor_leaves():
    with pytest.raises(TypeError, match="reduce"):
        reduce({"a": 1})


def test_pad_across_processes_is_the_identity():
    data = [torch.ones(2, 3), torch.zeros(4)]
    assert pad_across_processes(data, dim=1, pad_index=-1, pad_first=True) is data


def test_a_lost_peer_is_recognised_and_no_rank_left_without_a_group():
    from accel_state.process_group import rank_exit

    gloo = RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:20667. This is typically ...")
    assert rank_exit.is_lost_peer(gloo)
    assert not rank_exit.is_lost_peer(RuntimeError("shape mismatch"))
    assert rank_exit.ranks_that_left() == {}  # no process group: nothing to look up, nothing raised
    rank_exit.mark_exit()  # and nothing to mark
