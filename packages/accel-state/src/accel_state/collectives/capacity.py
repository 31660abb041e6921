"""How many payload bytes a communicator's next header exchange carries, agreed without talking.

A checked collective whose inputs travel in its header exchange costs one round trip, not two.
The exchange's size must be the same on every rank before any rank knows what the others bring,
so it cannot depend on this call's input. It depends on the exchanges before it instead, which
every rank saw alike: each header names its call (operation and arguments) and says how many
payload bytes its rank wanted to send, so every rank learns the same thing from each exchange:
"after a call to X came a call that needed N bytes". The next exchange carries the most that
followed the last call's kind in its last FOLLOWERS occurrences, rounded up to a power of two,
between INLINE_FLOOR and INLINE_CEILING. So a loop that gathers 64 KB of predictions per batch
pays one round trip from its second batch on, and the small collective between two gathers (a
pad, a reduce of the loss) still sends a small exchange.

Larger inputs of one tensor, up to BESIDE_CEILING, are remembered too: when the call after the
last call (the same operation, arguments and input shapes), the last time, was a gather of the same
number of bytes on every rank, the next exchange is foreseen to carry that many bytes beside it
(`beside`). Each rank whose call is a gather of exactly that size runs a second all_gather of its
tensor beside the header exchange, both in flight at once, so a loop that gathers 1 MB a batch does
not wait for the check's round trip before its data moves (nor one that gathers 1 MB of predictions
then 4 KB of labels: each is foreseen after the other). A rank whose call is anything else runs
nothing more: a foresight that does not come true costs nothing, when every rank makes the same
call. Only ranks whose calls differ (which the check then refuses on every rank) can split, and the
ranks that did not send beside then join that exchange with zeros, so that all stay in step.

This holds as long as every rank takes part in every checked collective, in the same order: what
any collective already requires, and what a rank that breaks it is told by the timeout that names
the operation.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

from accel_state.collectives.header import BESIDE_CEILING, INLINE_CEILING, INLINE_FLOOR

FOLLOWERS = 4  # the needs remembered per kind of call
KINDS = 256  # kinds of call remembered; past that, the memory starts again (alike on every rank)


def rounded(need: int) -> int:
    """Return the exchange payload that holds `need` bytes: a power of two within the bounds."""
    size = INLINE_FLOOR
    while size < need and size < INLINE_CEILING:
        size *= 2
    return size


def _beside_need(needs: list[int]) -> int:
    """Return the bytes every rank wanted to send beside the header exchange (0: not all alike)."""
    first = needs[0] if needs else 0
    if not INLINE_CEILING < first <= BESIDE_CEILING or any(need != first for need in needs):
        return 0
    return first


class InlineCapacity:
    """The payload size of one communicator's next header exchange, and of the one beside it."""

    def __init__(self) -> None:
        # Per kind of call, the inline bytes that the calls after its last FOLLOWERS occurrences needed.
        self.after: dict[int, collections.deque[int]] = {}
        # Per exact call (kind and input), the bytes beside of the call after it the last time (0:
        # not one tensor of the same size on every rank).
        self.beside_after: dict[Any, int] = {}
        self.last: int | None = None  # the kind of the last call, None after a mismatch
        self.last_exact: Any = None  # the exact call of the last one, None after a mismatch
        self.bytes = INLINE_FLOOR
        self.beside = 0  # the bytes per rank of the exchange beside the next one (0: none)

    def follow(self, kind: int | None, needs: list[int], exact: Any = None) -> None:
        """Take in the exchange just done: its call's kind (None when the ranks disagreed), every
        rank's need (the same on every rank) and the exact call (kind and input; the kind if None)."""
        if self.last is not None:
            if self.last not in self.after and len(self.after) >= KINDS:
                self.after.clear()
            followers = self.after.setdefault(self.last, collections.deque(maxlen=FOLLOWERS))
            followers.append(max((need for need in needs if need <= INLINE_CEILING), default=0))
            if self.last_exact not in self.beside_after and len(self.beside_after) >= KINDS:
                self.beside_after.clear()
            self.beside_after[self.last_exact] = _beside_need(needs)
        self.last = kind
        self.last_exact = None if kind is None else kind if exact is None else exact
        upcoming = self.after.get(kind) if kind is not None else None
        self.bytes = rounded(max(upcoming)) if upcoming else INLINE_FLOOR
        self.beside = self.beside_after.get(self.last_exact, 0) if kind is not None else 0


_by_communicator: weakref.WeakKeyDictionary[Any, InlineCapacity] = weakref.WeakKeyDictionary()


def capacity_of(communicator: Any) -> InlineCapacity:
    """Return `communicator`'s capacity (a new communicator, a new process group, starts small)."""
    capacity = _by_communicator.get(communicator)
    if capacity is None:
        capacity = _by_communicator[communicator] = InlineCapacity()
    return capacity
