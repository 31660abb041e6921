"""`split_for_process`: contiguous shares whose union, in process order, is the input."""

from __future__ import annotations

import pytest
import torch

from accel_state.shared_state.splitting import split_for_process


@pytest.mark.parametrize("length", range(0, 11))
def test_three_shares_concatenate_to_the_input_in_order(length):
    items = list(range(length))
    shares = [split_for_process(items, index, 3) for index in range(3)]
    assert [x for share in shares for x in share] == items
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # earlier processes take the extra items


def test_uneven_split_of_seven_into_three():
    assert [split_for_process(list(range(7)), i, 3) for i in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


def test_tensor_and_tuple_shares_keep_their_type():
    shares = [split_for_process(torch.arange(8).reshape(4, 2), i, 3) for i in range(3)]
    assert all(isinstance(s, torch.Tensor) for s in shares)
    assert torch.equal(torch.cat(shares), torch.arange(8).reshape(4, 2))
    assert split_for_process(("a", "b", "c", "d"), 1, 3) == ("c",)


def test_dict_values_are_split_alike():
    data = {"ids": list(range(5)), "x": torch.arange(5) * 10}
    shares = [split_for_process(data, i, 3) for i in range(3)]
    assert [s["ids"] for s in shares] == [[0, 1], [2, 3], [4]]
    assert [s["x"].tolist() for s in shares] == [[0, 10], [20, 30], [40]]


def test_dict_values_of_different_lengths_are_an_error():
    with pytest.raises(ValueError, match="differ in length"):
        split_for_process({"a": [1, 2], "b": [1, 2, 3]}, 0, 2)


def test_padding_repeats_the_last_item_of_short_shares():
    shares = [split_for_process(list(range(7)), i, 3, apply_padding=True) for i in range(3)]
    assert shares == [[0, 1, 2], [3, 4, 4], [5, 6, 6]]
    tensor_shares = [split_for_process(torch.arange(7), i, 3, apply_padding=True) for i in range(3)]
    assert [t.tolist() for t in tensor_shares] == [[0, 1, 2], [3, 4, 4], [5, 6, 6]]


def test_padding_fills_an_empty_share_with_the_last_input_item():
    shares = [split_for_process(["a", "b"], i, 3, apply_padding=True) for i in range(3)]
    assert shares == [["a"], ["b"], ["b"]]
    assert split_for_process(("a", "b"), 2, 3, apply_padding=True) == ("b",)


def test_padding_of_empty_input_stays_empty():
    assert split_for_process([], 1, 3, apply_padding=True) == []


def test_one_part_returns_the_input_itself():
    data = [1, 2, 3]
    assert split_for_process(data, 0, 1) is data
