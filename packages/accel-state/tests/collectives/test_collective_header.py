"""The header ranks exchange before a collective, and the error text built from full descriptions."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import namedtuple

import numpy as np
import pytest
import torch

from accel_state import CollectiveShapeError, CollectiveTimeoutError, PartialState
from accel_state.collectives.capacity import FOLLOWERS, InlineCapacity, capacity_of
from accel_state.collectives.header import (
    BESIDE,
    BESIDE_CEILING,
    FIXED_FIELDS,
    HEADER_BYTES,
    HEADER_LENGTH,
    INLINE_CEILING,
    INLINE_FLOOR,
    MAGIC,
    NEED_FIELD,
    NO_PAYLOAD,
    OUT_OF_RANGE,
    PAYLOAD_FIELD,
    SIZE_CAPACITY,
    carried_sizes,
    describe,
    describe_object,
    encode,
    exchange_tensor,
    headers_agree,
    payload_layout,
    payload_lengths,
    plan_exchange,
    tensor_bytes,
    unpack_beside,
    unpack_gathered,
    unpack_one,
)
from accel_state.collectives.nested import tensor_leaves
from accel_state.collectives.shape_check import agree_across_ranks, mismatch_message
from accel_state.environment import env_vars
from accel_state.process_group.timeouts import named_collective


def header(data, operation="gather", **kwargs):
    return encode(describe(operation, data, **kwargs))


def agree(*headers):
    return headers_agree(list(headers))


def test_header_has_a_fixed_length_whatever_the_input():
    inputs = [torch.ones(3), {"a": [torch.ones(2, 2)] * 100}, [], "text", {"k": torch.ones(1), "n": 3}]
    for data in inputs:
        values = header(data)
        assert len(values) == HEADER_LENGTH
        assert values[0] == MAGIC
        assert all(-(2**63) <= v < 2**63 for v in values)  # fits an int64 tensor
    assert torch.tensor(header(torch.ones(1)), dtype=torch.int64).shape == (HEADER_LENGTH,)


def test_equal_inputs_give_equal_headers():
    make = lambda: {"x": torch.zeros(4, 3), "y": (torch.ones(2, dtype=torch.int64), [torch.ones(())])}  # noqa: E731
    assert header(make()) == header(make())
    assert agree(header(torch.zeros(2, 3)), header(torch.ones(2, 3)))  # values never matter


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (torch.ones(2, 3), torch.ones(3, 2)),  # same number of elements
        (torch.ones(2, 5), torch.ones(3, 5)),
        (torch.ones(2, 3), torch.ones(2, 3, dtype=torch.int64)),
        (torch.ones(4), torch.ones(4, dtype=torch.float64)),
        (torch.ones(6), torch.ones(2, 3)),
        (torch.ones(()), torch.ones(1)),
        ({"a": torch.ones(2), "b": torch.ones(2)}, {"a": torch.ones(2)}),
        ({"a": torch.ones(2), "b": torch.ones(3)}, {"b": torch.ones(3), "a": torch.ones(2)}),  # key order
        ({"a": torch.ones(2)}, {"b": torch.ones(2)}),
        ([torch.ones(2), torch.ones(2)], (torch.ones(2), torch.ones(2))),
        ([torch.ones(2)], [[torch.ones(2)]]),
        ([torch.ones(2)], [torch.ones(2), torch.ones(2)]),
        ({"a": torch.ones(2)}, {"a": 1}),  # a non-tensor leaf on one rank
    ],
)
def test_any_difference_of_shape_dtype_or_structure_changes_the_header(ours, theirs):
    assert not agree(header(ours), header(theirs))


def test_operation_and_arguments_are_part_of_the_header():
    tensor = torch.ones(2)
    assert not agree(header(tensor, "gather"), header(tensor, "reduce"))
    assert not agree(
        header(tensor, "broadcast", arguments="from_process=0"),
        header(tensor, "broadcast", arguments="from_process=1"),
    )
    assert not agree(
        encode(describe_object("gather_object")), encode(describe_object("broadcast_object_list"))
    )
    assert not agree(
        encode(describe_object("broadcast_object_list", "items=3")),
        encode(describe_object("broadcast_object_list", "items=2")),
    )


def test_a_rank_that_cannot_take_part_changes_the_header():
    fine = encode(describe_object("gather_object"))
    broken = encode(describe_object("gather_object", problem="cannot send its object"))
    assert not agree(fine, broken)


def test_a_header_without_the_magic_value_never_agrees():
    values = header(torch.ones(2))
    other = list(values)
    other[0] = 0
    assert not agree(other, other)


def test_the_size_dim_may_differ_and_its_sizes_travel_in_the_header():
    ours = header(torch.ones(2, 3), "pad_across_processes", arguments="dim=1", size_dim=1)
    theirs = header(torch.ones(2, 5), "pad_across_processes", arguments="dim=1", size_dim=1)
    assert agree(ours, theirs)
    assert carried_sizes([ours, theirs]) == [[3, 5]]
    # The other dims and the number of dims may not differ.
    wider = header(torch.ones(4, 3), "pad_across_processes", arguments="dim=1", size_dim=1)
    flat = header(torch.ones(2), "pad_across_processes", arguments="dim=1", size_dim=1)
    assert not agree(ours, wider)
    assert not agree(ours, flat)


def test_negative_size_dim_and_tensors_without_that_dim():
    data = {"a": torch.ones(2, 7), "b": torch.ones(3)}
    values = header(data, size_dim=-2)
    assert values[3:5] == [2, 2]  # two tensors, both sizes carried
    assert values[FIXED_FIELDS : FIXED_FIELDS + 2] == [2, OUT_OF_RANGE]
    assert carried_sizes([values, values]) == [[2, 2], [OUT_OF_RANGE, OUT_OF_RANGE]]


def test_sizes_of_more_tensors_than_the_header_holds_are_not_carried():
    many = [torch.ones(i + 1) for i in range(SIZE_CAPACITY + 1)]
    values = header(many, size_dim=0)
    assert carried_sizes([values, values]) is None
    fits = header(many[:SIZE_CAPACITY], size_dim=0)
    assert carried_sizes([fits, fits]) == [[i + 1, i + 1] for i in range(SIZE_CAPACITY)]


def test_payload_length_is_carried_but_not_compared():
    description = describe_object("gather_object")
    ours, theirs = encode(description, 120), encode(description, NO_PAYLOAD)
    assert agree(ours, theirs)  # pickled objects differ in length between ranks
    assert payload_lengths([ours, theirs]) == [120, NO_PAYLOAD]


def test_tensors_are_described_in_the_order_recursively_apply_visits_them():
    Pair = namedtuple("Pair", "left right")

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        extra: dict

    data = Batch(torch.ones(1), {"p": Pair(torch.ones(2), [torch.ones(3)]), "q": (torch.ones(4, 1),)})
    shapes = [shape for _, _, shape in describe("gather", data).tensors]
    assert shapes == [tuple(t.shape) for t in tensor_leaves(data)]
    assert describe("gather", data).structure.count("\x00") == 4


def test_digests_are_the_same_in_every_process():
    # Python's str hash differs per process (PYTHONHASHSEED); the header holds BLAKE2b digests instead.
    expected = int.from_bytes(
        hashlib.blake2b(b"broadcast(from_process=0)", digest_size=8).digest(), "little", signed=True
    )
    assert header(torch.ones(2), "broadcast", arguments="from_process=0")[1] == expected


def test_message_names_each_rank_shape():
    per_rank = [describe("gather", torch.ones(2, 5)), describe("gather", torch.ones(3, 5))]
    assert (
        mismatch_message(per_rank)
        == "gather: tensors differ in shape across ranks: rank 0: (2, 5), rank 1: (3, 5)"
    )


def test_message_names_each_rank_dtype():
    per_rank = [describe("reduce", torch.ones(4)), describe("reduce", torch.ones(4, dtype=torch.float64))]
    message = mismatch_message(per_rank)
    assert "differ in dtype across ranks" in message
    assert "rank 0: (4,) float32, rank 1: (4,) float64" in message


def test_message_names_each_rank_structure_with_shapes_in_place():
    per_rank = [
        describe("gather", {"a": torch.ones(2), "b": [torch.ones(3)]}),
        describe("gather", {"a": torch.ones(2)}),
    ]
    message = mismatch_message(per_rank)
    assert "structure" in message
    assert "rank 0: dict{'a': (2,), 'b': list[(3,)]}, rank 1: dict{'a': (2,)}" in message


def test_message_names_different_operations_arguments_and_problems():
    ones = torch.ones(2)
    assert "rank 0: gather, rank 1: reduce" in mismatch_message(
        [describe("gather", ones), describe("reduce", ones)]
    )
    arguments = [describe("broadcast", ones, arguments=f"from_process={r}") for r in range(2)]
    assert "rank 0: from_process=0, rank 1: from_process=1" in mismatch_message(arguments)
    problem = [
        describe_object("gather_object", problem="cannot send its object: it does not pickle"),
        describe_object("gather_object"),
    ]
    assert mismatch_message(problem) == "gather_object: rank 0 cannot send its object: it does not pickle"


def test_message_for_a_size_dim_says_which_dim_may_differ():
    per_rank = [
        describe("pad_across_processes", t, arguments="dim=1", size_dim=1)
        for t in (torch.ones(2, 3), torch.ones(2))
    ]
    message = mismatch_message(per_rank)
    assert "only dim 1 may differ" in message
    assert "rank 0: (2, 3), rank 1: (2,)" in message


def test_message_lists_only_differing_tensors_of_a_large_input():
    ours = [torch.ones(2)] * 20
    theirs = [torch.ones(2)] * 19 + [torch.ones(3)]
    message = mismatch_message([describe("gather", ours), describe("gather", theirs)])
    assert "rank 0: tensor 19: (2,), rank 1: tensor 19: (3,)" in message


def test_shape_errors_are_never_reported_as_timeouts():
    # A user's dict key may be called "timeout"; the error must still be a CollectiveShapeError.
    with pytest.raises(CollectiveShapeError), named_collective("gather"):
        raise CollectiveShapeError(
            "gather: inputs differ in structure across ranks: rank 0: dict{'timeout': (1,)}"
        )
    with pytest.raises(CollectiveTimeoutError), named_collective("gather"):
        raise RuntimeError("Timed out waiting 3000ms for recv operation to complete")


# Payloads: inputs that fit the agreed capacity travel in the header exchange itself.

CPU = torch.device("cpu")


def payload_table(*tensor_lists):
    """Return the payloads an all_gather of each rank's exchange gives, and rank 0's offsets."""
    exchanges = [exchange_tensor(describe("gather", ts), CPU, tensor_bytes(ts, CPU)) for ts in tensor_lists]
    table = torch.stack([exchange for exchange, _ in exchanges])
    assert table.shape == (len(tensor_lists), HEADER_BYTES + INLINE_FLOOR)
    return table[:, HEADER_BYTES:], exchanges[0][1]


def test_small_tensors_of_any_dtype_round_trip_through_the_payload():
    ours = [torch.arange(6.0).reshape(2, 3), torch.tensor(7), torch.tensor([True, False]), torch.ones(0, 4)]
    theirs = [torch.full((2, 3), -1.0), torch.tensor(8), torch.tensor([False, True]), torch.ones(0, 4)]
    payloads, offsets = payload_table(ours, theirs)
    assert len(offsets) == 4 and all(o % 16 == 0 for o in offsets)
    for a, b, offset in zip(ours, theirs, offsets, strict=True):
        expected = torch.cat([a.reshape(-1, *a.shape[1:]), b.reshape(-1, *b.shape[1:])])
        gathered = unpack_gathered(payloads, offset, a)
        assert gathered.dtype == a.dtype and torch.equal(gathered, expected)
        assert torch.equal(unpack_one(payloads, 1, offset, a), b)


def test_views_conjugates_and_tensors_requiring_grad_are_sent_by_value():
    base = torch.arange(12.0).reshape(3, 4)
    complex_view = torch.tensor([1 + 2j, 3 - 1j]).conj()
    weight = torch.ones(3, requires_grad=True)
    payloads, offsets = payload_table([base.t(), complex_view, weight])
    assert torch.equal(unpack_one(payloads, 0, offsets[0], base.t()), base.t())
    assert torch.equal(unpack_one(payloads, 0, offsets[1], complex_view), complex_view.resolve_conj())
    assert torch.equal(unpack_one(payloads, 0, offsets[2], weight), weight.detach())


def test_inputs_too_large_or_on_another_device_type_do_not_travel_inline():
    def travels(tensors, capacity=INLINE_FLOOR):
        pieces = tensor_bytes(tensors, CPU)
        if pieces is None:
            return False
        _, offsets = exchange_tensor(describe("gather", tensors), CPU, pieces, capacity)
        return bool(offsets)

    assert travels([torch.ones(INLINE_FLOOR // 4)])
    assert not travels([torch.ones(INLINE_FLOOR // 4 + 1)])
    assert travels([torch.ones(INLINE_FLOOR // 4 + 1)], capacity=2 * INLINE_FLOOR)
    assert not travels([torch.ones(2), torch.ones(INLINE_FLOOR // 4)])  # alignment leaves no room
    assert not travels([])
    assert payload_layout([]) is None
    assert tensor_bytes([torch.ones(2, device="meta")], CPU) is None
    exchange, offsets = exchange_tensor(
        describe("gather", torch.ones(2000)), CPU, tensor_bytes([torch.ones(2000)], CPU)
    )
    assert offsets == [] and exchange.numel() == HEADER_BYTES + INLINE_FLOOR
    header = exchange[:HEADER_BYTES].view(torch.int64)
    assert header[PAYLOAD_FIELD].item() == NO_PAYLOAD
    assert header[NEED_FIELD].item() == 8000  # what it would have needed: the next capacity grows
    huge = torch.ones(INLINE_CEILING // 4 + 1)
    exchange, _ = exchange_tensor(describe("gather", huge), CPU, tensor_bytes([huge], CPU), INLINE_CEILING)
    assert exchange[:HEADER_BYTES].view(torch.int64)[NEED_FIELD].item() == 0  # never inline: no need


class TwoRanks:
    """The state of rank 0 of 2, whose peer (rank 1) sends `peer` and `peer_pieces`; a peer that
    `gathers` one tensor sends it beside the header exchange when that exchange is foreseen, and a
    peer whose call differs joins an exchange beside that only rank 0 started with zeros."""

    def __init__(self, peer, peer_pieces=None, gathers=False):
        self.num_processes, self.device = 2, CPU
        self.communicator = self
        self.peer, self.peer_pieces, self.gathers = peer, peer_pieces, gathers
        self.object_exchanges = 0
        self.exchanges = []  # per header exchange, the bytes beside it that rank 0 sent (0: none)
        self.joined = []  # the bytes of each exchange beside that rank 0 joined after its header's
        self.peer_beside = None  # what the peer sent beside the last header exchange, if anything

    def _peer_sends(self):
        capacity = capacity_of(self)  # the peer computed the same one from the same exchanges
        planned = plan_exchange(
            self.peer, self.peer_pieces, capacity.bytes, beside_ok=self.gathers, beside=capacity.beside
        )
        exchange, _ = exchange_tensor(self.peer, CPU, self.peer_pieces, capacity.bytes, planned=planned)
        sent_beside = planned[0].view("int64")[PAYLOAD_FIELD] == BESIDE
        self.peer_beside = torch.from_numpy(self.peer_pieces[0]) if sent_beside else None
        return exchange

    def all_gather_into(self, out, tensor):
        if self.peer_beside is not None:  # the exchange the peer started beside its header's
            self.joined.append(tensor.numel())
            out.copy_(torch.cat([tensor, self.peer_beside]))
            self.peer_beside = None
            return
        self.exchanges.append(0)
        out.copy_(torch.cat([tensor, self._peer_sends()]))

    def all_gather_two_into(self, out, tensor, second_out, second):
        self.exchanges.append(second.numel())
        out.copy_(torch.cat([tensor, self._peer_sends()]))
        peer_second = self.peer_beside if self.peer_beside is not None else torch.zeros_like(second)
        second_out.copy_(torch.cat([second, peer_second]))  # a peer that did not send joins with zeros
        self.peer_beside = None

    def all_gather_object(self, obj, world_size):
        self.object_exchanges += 1
        return [obj, self.peer]


def test_agreement_returns_every_rank_sizes_and_payloads():
    ours = describe("pad_across_processes", torch.ones(2, 3), arguments="dim=1", size_dim=1)
    theirs = describe("pad_across_processes", torch.ones(2, 5), arguments="dim=1", size_dim=1)
    state = TwoRanks(theirs, [torch.arange(16, dtype=torch.uint8)])
    agreement = agree_across_ranks(state, ours, pieces=[torch.ones(3, dtype=torch.uint8)])
    assert agreement.sizes == [[3, 5]]
    assert agreement.payload_lengths == [3, 16] and agreement.all_inline()
    assert agreement.payloads[1, :16].tolist() == list(range(16))
    assert agreement.payloads[0, :3].tolist() == [1, 1, 1]
    assert state.object_exchanges == 0  # the check costs one all_gather when the ranks agree


def test_a_mismatch_raises_naming_each_rank_after_one_exchange_of_descriptions():
    state = TwoRanks(describe("gather", torch.ones(3, 5)))
    with pytest.raises(CollectiveShapeError, match=r"rank 0: \(2, 5\), rank 1: \(3, 5\)"):
        agree_across_ranks(state, describe("gather", torch.ones(2, 5)))
    assert state.object_exchanges == 1


def test_a_mismatch_is_catchable_under_accelerates_name():
    from accel_state import DistributedOperationException

    state = TwoRanks(describe("gather", torch.ones(3, 5)))
    with pytest.raises(DistributedOperationException, match=r"rank 1: \(3, 5\)"):
        agree_across_ranks(state, describe("gather", torch.ones(2, 5)))
    assert issubclass(CollectiveShapeError, RuntimeError)  # still a CollectiveError too


def test_full_comparison_exchanges_descriptions_on_every_call():
    state = TwoRanks(describe("gather", torch.ones(2, 5)))
    agreement = agree_across_ranks(state, describe("gather", torch.ones(2, 5)), full=True)
    assert state.object_exchanges == 1
    assert not agreement.all_inline()


@pytest.mark.parametrize(
    ("raw", "debug", "checked"),
    [(None, None, True), ("", None, True), ("1", None, True), ("0", None, False), ("0", "1", True)],
)
def test_check_collectives_is_on_unless_set_to_false_and_debug_mode_always_checks(
    monkeypatch, raw, debug, checked
):
    for name, value in ((env_vars.CHECK_COLLECTIVES, raw), (env_vars.DEBUG_MODE, debug)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert PartialState().check_collectives is checked


# Capacity: the payload size of the next exchange, computed alike on every rank from past headers.


def test_capacity_follows_what_came_after_the_same_kind_of_call():
    gather, pad = 11, 22  # call digests
    capacity = InlineCapacity()
    assert capacity.bytes == INLINE_FLOOR
    capacity.follow(gather, [3000, 10])
    assert capacity.bytes == INLINE_FLOOR  # nothing is known yet of what follows a gather
    capacity.follow(gather, [3000, 10])
    assert capacity.bytes == 4096  # a gather needing 3000 bytes followed: rounded to a power of two
    capacity.follow(pad, [0, 0])
    assert capacity.bytes == INLINE_FLOOR  # nothing is known yet of what follows a pad
    capacity.follow(gather, [3000, 0])
    assert capacity.bytes == 4096  # after a gather: the most of its last followers (a gather, a pad)
    capacity.follow(pad, [0, 0])
    assert capacity.bytes == 4096  # a gather followed a pad once
    capacity.follow(gather, [INLINE_CEILING - 100, 0])
    capacity.follow(pad, [0, 0])
    assert capacity.bytes == INLINE_CEILING  # never more than the ceiling
    capacity.follow(gather, [10 * INLINE_CEILING, 10 * INLINE_CEILING])
    capacity.follow(pad, [0, 0])
    assert capacity.bytes == INLINE_CEILING  # a need above it (beside the exchange) does not count
    for _ in range(FOLLOWERS):
        capacity.follow(pad, [0, 0])
    assert capacity.bytes == INLINE_FLOOR  # the large followers are forgotten
    capacity.follow(None, [])
    assert capacity.last is None and capacity.bytes == INLINE_FLOOR  # after a mismatch


def test_an_input_that_did_not_fit_travels_inline_from_the_next_call_on():
    tensor = torch.arange(1000.0)  # 4000 bytes
    state = TwoRanks(describe("gather", tensor), tensor_bytes([tensor], CPU))
    first = agree_across_ranks(state, describe("gather", tensor), pieces=tensor_bytes([tensor], CPU))
    assert not first.all_inline() and first.payload_lengths == [NO_PAYLOAD, NO_PAYLOAD]
    assert capacity_of(state).bytes == INLINE_FLOOR  # what follows a gather is not known yet
    again = agree_across_ranks(state, describe("gather", tensor), pieces=tensor_bytes([tensor], CPU))
    assert not again.all_inline() and capacity_of(state).bytes == 4096
    second = agree_across_ranks(state, describe("gather", tensor), pieces=tensor_bytes([tensor], CPU))
    assert second.all_inline() and second.payloads.shape == (2, 4096)
    gathered = unpack_gathered(second.payloads, second.offsets[0], tensor)
    assert torch.equal(gathered, torch.cat([tensor, tensor]))


def test_a_mismatch_leaves_every_rank_with_the_same_capacity():
    state = TwoRanks(describe("gather", torch.ones(3, 5)), [torch.ones(60, dtype=torch.uint8)])
    capacity_of(state).follow(7, [4096])
    with pytest.raises(CollectiveShapeError):
        agree_across_ranks(
            state, describe("gather", torch.ones(2, 5)), pieces=[torch.ones(40, dtype=torch.uint8)]
        )
    capacity = capacity_of(state)  # the peer's, too: the mismatched exchange counts as no need
    assert capacity.last is None and capacity.bytes == INLINE_FLOOR and list(capacity.after[7]) == [0]
    assert capacity.beside == 0


def test_what_an_exchange_returns_outlives_the_next_exchange_in_the_same_buffers():
    first, second = torch.arange(8.0), torch.full((8,), -1.0)
    state = TwoRanks(describe("gather", first), tensor_bytes([first + 100], CPU))
    agreement = agree_across_ranks(state, describe("gather", first), pieces=tensor_bytes([first], CPU))
    gathered = unpack_gathered(agreement.payloads, agreement.offsets[0], first)
    state.peer_pieces = tensor_bytes([second + 100], CPU)
    again = agree_across_ranks(state, describe("gather", second), pieces=tensor_bytes([second], CPU))
    assert np.shares_memory(agreement.payloads, again.payloads)  # the host buffers are reused...
    assert torch.equal(gathered, torch.cat([first, first + 100]))  # ...but a result is its own copy
    assert torch.equal(
        unpack_gathered(again.payloads, again.offsets[0], second), torch.cat([second, second + 100])
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.float16])
def test_tensors_of_any_dtype_travel_as_their_bytes(dtype):
    tensor = torch.arange(6).reshape(2, 3).to(dtype)
    (piece,) = tensor_bytes([tensor], CPU)
    assert (
        isinstance(piece, np.ndarray) and piece.dtype == np.uint8 and piece.size == 6 * tensor.element_size()
    )
    state = TwoRanks(describe("gather", tensor), tensor_bytes([tensor * 2], CPU))
    agreement = agree_across_ranks(state, describe("gather", tensor), pieces=[piece])
    gathered = unpack_gathered(agreement.payloads, agreement.offsets[0], tensor)
    assert gathered.dtype == dtype and torch.equal(gathered, torch.cat([tensor, tensor * 2]))


def test_strided_and_expanded_tensors_travel_as_their_values():
    base = torch.arange(12.0).reshape(3, 4)
    for view in (base[:, ::2], base[:1].expand(3, 4), torch.arange(8, dtype=torch.bfloat16)[::2]):
        (piece,) = tensor_bytes([view], CPU)
        assert piece.size == view.numel() * view.element_size()
        state = TwoRanks(describe("gather", view), tensor_bytes([view], CPU))
        agreement = agree_across_ranks(state, describe("gather", view), pieces=[piece])
        assert torch.equal(
            unpack_gathered(agreement.payloads, agreement.offsets[0], view), torch.cat([view, view])
        )


# Beside the header exchange: a repeated gather of one large tensor, foreseen alike on every rank.

LARGE = INLINE_CEILING * 4  # bytes: too many to ride in the header exchange


def test_capacity_foresees_the_size_that_followed_the_same_call_last_time():
    gather, pad = 11, 22
    capacity = InlineCapacity()
    capacity.follow(gather, [LARGE, LARGE])  # the first gather: nothing has followed one yet
    assert capacity.beside == 0
    capacity.follow(gather, [LARGE, LARGE])
    assert capacity.beside == LARGE  # a gather of LARGE followed a gather last time
    assert capacity.bytes < LARGE  # the header exchange itself stays small
    capacity.follow(pad, [0, 0])  # foreseen wrongly: no rank's call could send beside, none did
    assert capacity.beside == 0  # nothing is known of what follows a pad
    capacity.follow(gather, [0, 0])
    assert capacity.beside == 0  # a pad followed the gather last time
    capacity.follow(gather, [LARGE, LARGE])
    assert capacity.beside == LARGE  # and now a gather of LARGE did
    capacity.follow(None, [])
    assert capacity.beside == 0 and capacity.last_exact is None  # after a mismatch


def test_the_same_call_on_inputs_of_other_shapes_is_foreseen_apart():
    gather = 11
    predictions, labels = (gather, 1), (gather, 2)  # (call, input) digests
    capacity = InlineCapacity()
    foreseen = []
    for _ in range(5):  # per batch: a gather of LARGE predictions, then a gather of small labels
        capacity.follow(gather, [LARGE, LARGE], predictions)
        foreseen.append(capacity.beside)  # before the labels' gather
        capacity.follow(gather, [400, 400], labels)
        foreseen.append(capacity.beside)  # before the next predictions' gather
    assert foreseen == [0, 0] + [0, LARGE] * 4  # the predictions foreseen from the second batch on


@pytest.mark.parametrize(
    "needs",
    [[LARGE, LARGE + 4], [LARGE, 0], [BESIDE_CEILING + 4, BESIDE_CEILING + 4], [4096, 4096]],
    ids=["ranks differ", "one rank has none", "above the ceiling", "small enough to ride inline"],
)
def test_capacity_foresees_nothing_beside_unless_every_rank_needs_the_same_large_size(needs):
    capacity = InlineCapacity()
    for _ in range(FOLLOWERS + 1):
        capacity.follow(7, needs)
    assert capacity.beside == 0


def test_only_a_single_piece_of_a_call_that_can_take_it_goes_beside():
    tensor = torch.ones(LARGE // 4)
    (piece,) = tensor_bytes([tensor], CPU)
    description = describe("gather", tensor)

    def fields(pieces, **plan):
        header, offsets = plan_exchange(description, pieces, INLINE_CEILING, **plan)
        values = header.view("int64")
        return int(values[PAYLOAD_FIELD]), int(values[NEED_FIELD]), offsets

    assert fields([piece], beside_ok=True, beside=LARGE) == (BESIDE, LARGE, [])
    assert fields([piece], beside_ok=True) == (NO_PAYLOAD, LARGE, [])  # needed: may be foreseen next
    assert fields([piece], beside_ok=True, beside=LARGE + 16) == (NO_PAYLOAD, LARGE, [])  # not its size
    assert fields([piece], beside=LARGE) == (NO_PAYLOAD, 0, [])  # a call that cannot take it
    assert fields([piece, piece], beside_ok=True, beside=LARGE) == (NO_PAYLOAD, 0, [])


def gathering_peer(tensor):
    """Two ranks whose peer gathers `tensor`."""
    return TwoRanks(describe("gather", tensor), tensor_bytes([tensor], CPU), gathers=True)


def switch_peer(state, tensor):
    state.peer, state.peer_pieces = describe("gather", tensor), tensor_bytes([tensor], CPU)


def gather_check(state, tensor):
    pieces = tensor_bytes([tensor], CPU)
    return agree_across_ranks(state, describe("gather", tensor), pieces=pieces, beside_ok=True)


def test_a_foreseen_gather_gets_every_rank_tensor_from_the_exchange_beside_the_header():
    ours, theirs = torch.arange(LARGE // 4, dtype=torch.float32), -torch.arange(LARGE // 4.0)
    state = gathering_peer(theirs)
    for _ in range(2):
        agreement = gather_check(state, ours)
        assert agreement.beside is None and not agreement.all_inline()
    assert state.exchanges == [0, 0]
    agreement = gather_check(state, ours)
    assert state.exchanges[-1] == LARGE and agreement.payload_lengths == [BESIDE, BESIDE]
    gathered = unpack_beside(agreement.beside, 2, ours)
    assert torch.equal(gathered, torch.cat([ours, theirs]))
    assert gathered.data_ptr() == agreement.beside.data_ptr()  # viewed, not copied
    assert ours.data_ptr() != gathered.data_ptr()
    assert state.joined == []


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_every_dtype_and_shape_comes_back_from_the_bytes_beside(dtype):
    shape = (2, LARGE // 2 // torch.tensor([], dtype=dtype).element_size())
    ours = torch.ones(shape).to(dtype)
    theirs = torch.zeros(shape).to(dtype)
    state = gathering_peer(theirs)
    for _ in range(3):
        agreement = gather_check(state, ours)
    assert agreement.beside is not None
    gathered = unpack_beside(agreement.beside, 2, ours)
    assert gathered.dtype == dtype and gathered.shape == (4, shape[1])
    assert torch.equal(gathered, torch.cat([ours, theirs]))


def foreseen_gathers(ours, theirs):
    """Two ranks that gathered `ours` and `theirs` until the next gather's size is foreseen."""
    state = gathering_peer(theirs)
    for _ in range(2):
        gather_check(state, ours)
    assert capacity_of(state).beside == ours.numel() * ours.element_size()
    return state


def test_a_call_that_is_not_a_gather_of_the_foreseen_size_sends_nothing_beside():
    state = foreseen_gathers(torch.ones(LARGE // 4), torch.zeros(LARGE // 4))
    # Both ranks gather another size: nothing beside, and the data takes its own exchange.
    other = torch.ones(LARGE // 4 + 4)
    switch_peer(state, torch.zeros(LARGE // 4 + 4))
    agreement = gather_check(state, other)
    assert state.exchanges[-1] == 0 and agreement.beside is None and state.joined == []
    assert agreement.payload_lengths == [NO_PAYLOAD, NO_PAYLOAD]
    # Both ranks pad after the gathers: one header exchange, no more.
    state = foreseen_gathers(torch.ones(LARGE // 4), torch.zeros(LARGE // 4))
    padded = describe("pad_across_processes", torch.ones(LARGE // 4), arguments="dim=0", size_dim=0)
    state.peer, state.peer_pieces, state.gathers = padded, None, False
    agreement = agree_across_ranks(state, padded)
    assert state.exchanges[-1] == 0 and state.joined == [] and agreement.sizes == [[LARGE // 4] * 2]


def test_a_mismatch_during_a_foreseen_exchange_raises_naming_both_ranks():
    ours = torch.ones(LARGE // 8, 2)
    state = foreseen_gathers(ours, torch.zeros(LARGE // 8, 2))
    wrong = torch.zeros(2, LARGE // 8)  # the same bytes, another shape: must not be reinterpreted
    switch_peer(state, wrong)
    with pytest.raises(CollectiveShapeError, match=r"rank 0: \(32768, 2\), rank 1: \(2, 32768\)"):
        gather_check(state, ours)
    assert state.exchanges[-1] == LARGE  # it travelled beside, and was refused by the header
    assert capacity_of(state).beside == 0 and capacity_of(state).last is None


@pytest.mark.parametrize("sender", ["this rank", "the other rank"])
def test_ranks_whose_calls_differ_during_a_foreseen_exchange_run_the_same_collectives_and_raise(sender):
    ours = torch.ones(LARGE // 4)
    state = foreseen_gathers(ours, torch.zeros(LARGE // 4))
    other = torch.zeros(LARGE // 4 + 4)  # only one rank's gather is of the foreseen size
    if sender == "this rank":
        switch_peer(state, other)
    else:
        ours = torch.ones(LARGE // 4 + 4)
    with pytest.raises(CollectiveShapeError, match=r"rank 0: \(\d+,\), rank 1: \(\d+,\)"):
        gather_check(state, ours)
    if sender == "this rank":  # its tensor went beside the header; the other joined with zeros
        assert state.exchanges[-1] == LARGE and state.joined == []
    else:  # the other's went beside: this rank joined that exchange after the headers showed it
        assert state.exchanges[-1] == 0 and state.joined == [LARGE]
    assert state.peer_beside is None  # every exchange either rank started was joined
    # Both ranks go on in step: the next gather is checked and moves the data as ever.
    switch_peer(state, torch.zeros(LARGE // 4))
    agreement = gather_check(state, torch.ones(LARGE // 4))
    assert agreement.beside is None and agreement.payload_lengths == [NO_PAYLOAD, NO_PAYLOAD]


def test_the_header_bytes_do_not_change_with_the_exchange_beside():
    tensor = torch.ones(LARGE // 4)
    exchange, _ = exchange_tensor(describe("gather", tensor), CPU, tensor_bytes([tensor], CPU), 1024)
    assert exchange.numel() == HEADER_BYTES + 1024  # the large tensor never enters the header's
