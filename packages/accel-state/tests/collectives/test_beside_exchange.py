"""A gather of one tensor whose size the calls before it foresaw travels beside the header exchange."""

from __future__ import annotations

import pytest
import torch

from accel_state import CollectiveShapeError
from accel_state.collectives.capacity import FOLLOWERS, InlineCapacity, capacity_of
from accel_state.collectives.header import (
    BESIDE,
    BESIDE_CEILING,
    HEADER_BYTES,
    INLINE_CEILING,
    NEED_FIELD,
    NO_PAYLOAD,
    PAYLOAD_FIELD,
    describe,
    exchange_tensor,
    plan_exchange,
    tensor_bytes,
    unpack_beside,
)
from accel_state.collectives.shape_check import agree_across_ranks

CPU = torch.device("cpu")
LARGE = INLINE_CEILING * 4  # bytes: too many to ride in the header exchange


def test_capacity_foresees_a_size_only_after_every_rank_needed_it_after_the_same_kind_of_call():
    gather, pad = 11, 22
    capacity = InlineCapacity()
    capacity.follow(gather, [LARGE, LARGE])  # the first gather: nothing has followed one yet
    for _ in range(FOLLOWERS):
        assert capacity.beside == 0  # not yet FOLLOWERS times
        capacity.follow(gather, [LARGE, LARGE])
    assert capacity.beside == LARGE
    assert capacity.bytes < LARGE  # the header exchange itself stays small
    capacity.follow(pad, [0, 0])  # foreseen wrongly: the pad's ranks sent LARGE zero bytes
    assert capacity.beside == 0  # nothing is known of what follows a pad
    capacity.follow(gather, [0, 0])
    assert capacity.beside == 0  # the streak after a gather starts again...
    for _ in range(2 * FOLLOWERS - 1):
        capacity.follow(gather, [LARGE, LARGE])
        assert capacity.beside == 0  # ...and must now be twice as long
    capacity.follow(gather, [LARGE, LARGE])
    assert capacity.beside == LARGE


def test_long_runs_are_foreseen_again_after_each_break():
    gather, pad = 11, 22
    capacity = InlineCapacity()
    capacity.follow(pad, [0, 0])
    for _ in range(10):  # blocks of 60 gathers of LARGE, then 60 pads
        sent = []
        for _ in range(60):
            sent.append(capacity.beside)
            capacity.follow(gather, [LARGE, LARGE])
        wasted = capacity.beside  # what the first pad's ranks send beside it
        for _ in range(60):
            capacity.follow(pad, [0, 0])
        assert sent.count(LARGE) >= 60 - 1 - 2 * FOLLOWERS  # foreseen after 8 gathers at most
        assert wasted in (0, LARGE)
    assert capacity.streaks[gather].required <= 2 * FOLLOWERS


def test_a_pattern_that_keeps_breaking_just_after_it_is_foreseen_is_soon_not_foreseen_at_all():
    gather, reduce = 11, 33
    capacity = InlineCapacity()
    capacity.follow(reduce, [8, 8])
    wasted, used = [], []
    for _ in range(50):  # per step: five gathers of LARGE, then a reduce of the loss
        used.append(capacity.beside)  # what the first gather's ranks send beside it
        for _ in range(5):
            capacity.follow(gather, [LARGE, LARGE])
        wasted.append(capacity.beside)  # what the reduce's ranks send beside it
        capacity.follow(reduce, [8, 8])
    assert wasted[0] == LARGE  # four gathers after a gather foresaw a fifth, once...
    assert not any(wasted[1:])  # ...then a streak of 4 was no longer enough
    assert used == [0] * 4 + [LARGE] * 46  # a gather always follows the reduce: foreseen from step 4


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


class TwoRanks:
    """The state of rank 0 of 2; the peer (rank 1) gathers `peer`, or calls with `peer_description`."""

    def __init__(self, peer, peer_description=None):
        self.num_processes, self.device = 2, CPU
        self.communicator = self
        self.peer = peer
        self.peer_description = peer_description or describe("gather", peer)
        self.exchanges = []  # per exchange, the bytes beside the header exchange (0: none)

    def _peer_sends(self, beside):
        capacity = capacity_of(self)  # the peer computed the same one from the same exchanges
        pieces = tensor_bytes([self.peer], CPU)
        plan = {"beside_ok": True, "beside": beside}
        header, offsets = plan_exchange(self.peer_description, pieces, capacity.bytes, **plan)
        exchange, _ = exchange_tensor(
            self.peer_description, CPU, pieces, capacity.bytes, planned=(header, offsets)
        )
        travels = header.view("int64")[PAYLOAD_FIELD] == BESIDE
        return exchange, torch.from_numpy(pieces[0]) if travels else torch.zeros(beside, dtype=torch.uint8)

    def all_gather_into(self, out, tensor):
        self.exchanges.append(0)
        out.copy_(torch.cat([tensor, self._peer_sends(0)[0]]))

    def all_gather_two_into(self, out, tensor, second_out, second):
        self.exchanges.append(second.numel())
        exchange, beside = self._peer_sends(second.numel())
        out.copy_(torch.cat([tensor, exchange]))
        second_out.copy_(torch.cat([second, beside]))

    def all_gather_object(self, obj, world_size):
        return [obj, self.peer_description]


def gather_check(state, tensor):
    pieces = tensor_bytes([tensor], CPU)
    return agree_across_ranks(state, describe("gather", tensor), pieces=pieces, beside_ok=True)


def test_a_foreseen_gather_gets_every_rank_tensor_from_the_exchange_beside_the_header():
    ours, theirs = torch.arange(LARGE // 4, dtype=torch.float32), -torch.arange(LARGE // 4.0)
    state = TwoRanks(theirs)
    for _ in range(FOLLOWERS + 1):
        agreement = gather_check(state, ours)
        assert agreement.beside is None and not agreement.all_inline()
    assert state.exchanges == [0] * (FOLLOWERS + 1)
    agreement = gather_check(state, ours)
    assert state.exchanges[-1] == LARGE and agreement.payload_lengths == [BESIDE, BESIDE]
    gathered = unpack_beside(agreement.beside, 2, ours)
    assert torch.equal(gathered, torch.cat([ours, theirs]))
    assert gathered.data_ptr() == agreement.beside.data_ptr()  # viewed, not copied
    assert ours.data_ptr() != gathered.data_ptr()


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_every_dtype_and_shape_comes_back_from_the_bytes_beside(dtype):
    shape = (2, LARGE // 2 // torch.tensor([], dtype=dtype).element_size())
    ours = torch.ones(shape).to(dtype)
    theirs = torch.zeros(shape).to(dtype)
    state = TwoRanks(theirs)
    for _ in range(FOLLOWERS + 2):
        agreement = gather_check(state, ours)
    assert agreement.beside is not None
    gathered = unpack_beside(agreement.beside, 2, ours)
    assert gathered.dtype == dtype and gathered.shape == (4, shape[1])
    assert torch.equal(gathered, torch.cat([ours, theirs]))


def test_a_call_that_breaks_the_pattern_is_checked_as_ever_and_the_pattern_must_hold_again():
    ours = torch.ones(LARGE // 4)
    state = TwoRanks(torch.zeros(LARGE // 4))
    for _ in range(FOLLOWERS + 1):
        gather_check(state, ours)
    assert capacity_of(state).beside == LARGE
    # Both ranks gather another size: both send zeros beside, and the data takes its own exchange.
    other = torch.ones(LARGE // 4 + 4)
    state.peer, state.peer_description = torch.zeros(LARGE // 4 + 4), describe("gather", other)
    agreement = gather_check(state, other)
    assert state.exchanges[-1] == LARGE and agreement.beside is None
    assert agreement.payload_lengths == [NO_PAYLOAD, NO_PAYLOAD]
    assert capacity_of(state).beside == 0


def test_a_mismatch_during_a_foreseen_exchange_raises_naming_both_ranks():
    ours = torch.ones(LARGE // 8, 2)
    state = TwoRanks(torch.zeros(LARGE // 8, 2))
    for _ in range(FOLLOWERS + 1):
        gather_check(state, ours)
    wrong = torch.zeros(2, LARGE // 8)  # the same bytes, another shape: must not be reinterpreted
    state.peer, state.peer_description = wrong, describe("gather", wrong)
    with pytest.raises(CollectiveShapeError, match=r"rank 0: \(32768, 2\), rank 1: \(2, 32768\)"):
        gather_check(state, ours)
    assert state.exchanges[-1] == LARGE  # it travelled beside, and was refused by the header
    assert capacity_of(state).beside == 0 and capacity_of(state).last is None


def test_the_header_bytes_do_not_change_with_the_exchange_beside():
    tensor = torch.ones(LARGE // 4)
    exchange, _ = exchange_tensor(describe("gather", tensor), CPU, tensor_bytes([tensor], CPU), 1024)
    assert exchange.numel() == HEADER_BYTES + 1024  # the large tensor never enters the header's
