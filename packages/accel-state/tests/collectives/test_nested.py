"""`recursively_apply` and `send_to_device` keep container types and leave other leaves alone."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple

import pytest
import torch

from accel_state import recursively_apply, send_to_device
from accel_state.collectives.nested import leaves, tensor_leaves

Pair = namedtuple("Pair", ["left", "right"])


def _nested():
    return {
        "list": [torch.ones(2), "text", 3],
        "tuple": (torch.zeros(1), None),
        "pair": Pair(torch.arange(3), "label"),
        "inner": OrderedDict(x=torch.tensor(2.0)),
    }


def test_recursively_apply_keeps_types_and_non_tensor_leaves():
    out = recursively_apply(lambda t: t + 1, _nested())
    assert type(out) is dict
    assert isinstance(out["list"], list) and out["list"][1:] == ["text", 3]
    assert out["list"][0].tolist() == [2.0, 2.0]
    assert isinstance(out["tuple"], tuple) and out["tuple"][1] is None
    assert out["tuple"][0].tolist() == [1.0]
    assert type(out["pair"]) is Pair
    assert out["pair"].left.tolist() == [1, 2, 3] and out["pair"].right == "label"
    assert type(out["inner"]) is OrderedDict
    assert out["inner"]["x"].item() == 3.0


def test_recursively_apply_on_a_bare_tensor_and_a_string():
    assert recursively_apply(lambda t: t * 2, torch.tensor(3)).item() == 6
    assert recursively_apply(lambda t: t * 2, "abc") == "abc"


def test_error_on_other_type_names_the_operation_and_type():
    with pytest.raises(TypeError, match="my_op .*got str"):
        recursively_apply(lambda t: t, [torch.ones(1), "abc"], error_on_other_type=True, name="my_op")


def test_send_to_device_moves_every_tensor_and_keeps_strings():
    out = send_to_device(_nested(), "meta")
    assert out["list"][0].device.type == "meta"
    assert out["list"][1:] == ["text", 3]
    assert out["tuple"][0].device.type == "meta"
    assert type(out["pair"]) is Pair and out["pair"].left.device.type == "meta"
    assert out["pair"].right == "label"
    assert type(out["inner"]) is OrderedDict and out["inner"]["x"].device.type == "meta"


def test_send_to_device_leaves_tensors_already_there_untouched():
    tensor = torch.ones(3)
    assert send_to_device(tensor, torch.device("cpu")) is tensor
    assert send_to_device([tensor], "cpu")[0] is tensor


class _MovesItself:
    def __init__(self, accepts_non_blocking: bool) -> None:
        self.accepts_non_blocking = accepts_non_blocking
        self.calls = []

    def to(self, device, **kwargs):
        if kwargs and not self.accepts_non_blocking:
            raise TypeError("unexpected keyword")
        self.calls.append((device, kwargs))
        return self


@pytest.mark.parametrize("accepts_non_blocking", [True, False])
def test_send_to_device_delegates_to_objects_with_a_to_method(accepts_non_blocking):
    obj = _MovesItself(accepts_non_blocking)
    assert send_to_device(obj, "meta", non_blocking=True) is obj
    device, kwargs = obj.calls[-1]
    assert device == torch.device("meta")
    assert kwargs == ({"non_blocking": True} if accepts_non_blocking else {})


def test_leaves_walks_what_recursively_apply_walks_and_keeps_other_leaves():
    @dataclasses.dataclass
    class Batch:
        ids: torch.Tensor
        label: str

    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    data = {"x": [a, Pair(b, "text")], "batch": Batch(c, "name"), "n": 3}
    found = leaves(data)
    assert len(found) == 6
    assert [id(x) for x in found if isinstance(x, torch.Tensor)] == [id(x) for x in tensor_leaves(data)]
    assert [x for x in found if not isinstance(x, torch.Tensor)] == ["text", "name", 3]
