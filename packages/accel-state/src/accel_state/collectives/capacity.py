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

Larger inputs of one tensor, up to BESIDE_CEILING, are remembered too: when every rank's last
FOLLOWERS calls (at first) after the last call's kind were gathers of exactly the same number of
bytes, the next exchange has a second all_gather of that size beside it (`beside`), both in flight
at once, so a loop that gathers 1 MB a batch does not wait for the check's round trip before its data
moves. A call that breaks the pattern sends that many zero bytes once, and the pattern must then
hold twice as long as before (up to MOST_REQUIRED calls) to be foreseen again: a pattern that keeps
breaking soon costs nothing more.

This holds as long as every rank takes part in every checked collective, in the same order: what
any collective already requires, and what a rank that breaks it is told by the timeout that names
the operation.
"""

from __future__ import annotations

import collections
import dataclasses
import weakref
from typing import Any

from accel_state.collectives.header import BESIDE_CEILING, INLINE_CEILING, INLINE_FLOOR

FOLLOWERS = 4  # the needs remembered per kind of call
KINDS = 256  # kinds of call remembered; past that, the memory starts again (alike on every rank)
MOST_REQUIRED = 1024  # the longest streak a kind of call ever needs before it foresees the next


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


@dataclasses.dataclass
class Streak:
    """The calls after one kind of call that needed the same bytes beside, one after another."""

    bytes: int = 0
    length: int = 0
    required: int = FOLLOWERS  # the length that foresees the next call; doubled by each miss


class InlineCapacity:
    """The payload size of one communicator's next header exchange, and of the one beside it."""

    def __init__(self) -> None:
        # Per kind of call, what the calls after it needed: the inline bytes of the last FOLLOWERS,
        # and the streak of equal bytes beside.
        self.after: dict[int, collections.deque[int]] = {}
        self.streaks: dict[int, Streak] = {}
        self.last: int | None = None  # the kind of the last call, None after a mismatch
        self.bytes = INLINE_FLOOR
        self.beside = 0  # the bytes per rank of the exchange beside the next one (0: none)

    def follow(self, kind: int | None, needs: list[int]) -> None:
        """Take in the exchange just done: its call's kind (None when the ranks disagreed) and
        every rank's need (the same on every rank)."""
        if self.last is not None:
            if self.last not in self.after and len(self.after) >= KINDS:
                self.after.clear()
                self.streaks.clear()
            followers = self.after.setdefault(self.last, collections.deque(maxlen=FOLLOWERS))
            followers.append(max((need for need in needs if need <= INLINE_CEILING), default=0))
            self._extend(self.streaks.setdefault(self.last, Streak()), _beside_need(needs))
        self.last = kind
        upcoming = self.after.get(kind) if kind is not None else None
        self.bytes = rounded(max(upcoming)) if upcoming else INLINE_FLOOR
        streak = self.streaks.get(kind) if kind is not None else None
        foreseen = streak is not None and streak.bytes and streak.length >= streak.required
        self.beside = streak.bytes if foreseen and streak is not None else 0

    def _extend(self, streak: Streak, beside: int) -> None:
        """Add the bytes beside of the call just done to the streak of the kind before it.

        A call the streak foresaw wrongly (its ranks sent that many bytes for nothing) doubles the
        length the streak needs before it foresees again: a pattern that keeps breaking just after
        it is foreseen, such as five gathers then a reduce per step, is soon not foreseen at all.
        A streak four times as long as it needed shows runs long enough to pay for the call that
        ends them (an evaluation's gathers, then a save): it needs FOLLOWERS again.
        """
        if self.beside and beside != self.beside:
            streak.required = min(streak.required * 2, MOST_REQUIRED)
        if beside == streak.bytes:
            streak.length += 1
        else:
            streak.bytes, streak.length = beside, 1
        if streak.length >= 4 * streak.required:
            streak.required = FOLLOWERS


_by_communicator: weakref.WeakKeyDictionary[Any, InlineCapacity] = weakref.WeakKeyDictionary()


def capacity_of(communicator: Any) -> InlineCapacity:
    """Return `communicator`'s capacity (a new communicator, a new process group, starts small)."""
    capacity = _by_communicator.get(communicator)
    if capacity is None:
        capacity = _by_communicator[communicator] = InlineCapacity()
    return capacity
