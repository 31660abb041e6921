"""Collective timeouts that say which operation timed out.

When a rank never reaches a collective, gloo fails the others after the process group's timeout
with a message about its own transport ("Timed out waiting 3000ms for recv operation to
complete"), naming no accel operation. `named_collective` turns that into a
`CollectiveTimeoutError` naming the operation, this rank, and the setting that controls the wait.
When a rank left the job instead (it ended while the others still call collectives), gloo fails the
others with "Connection closed by peer"; the ranks that left marked it in the job's store
(`accel_state.process_group.rank_exit`), and the error becomes a `RankLeftError` naming them and the
operation.

Being the one place every user-level collective enters, `named_collective` also keeps this rank's
collective log (collective_log) and, when a collective fails on a timeout or a lost peer, writes
this rank's diagnosis report before raising (process_group.diagnosis); in debug mode it lets the
ranks agree on the operation first where the operation does not check its inputs itself.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from accel_state.environment import env_vars
from accel_state.process_group import collective_log, rank_exit

F = TypeVar("F", bound=Callable[..., Any])
# Substrings of the errors torch raises on a collective timeout (gloo, NCCL watchdog, store).
_TIMEOUT_MARKS = ("timed out", "timeout", "watchdog caught collective operation")


class CollectiveError(RuntimeError):
    """Base of the errors accel raises about a collective; each names its operation already."""


class CollectiveTimeoutError(CollectiveError):
    """A collective did not complete in time: some process never reached it."""


class RankLeftError(CollectiveError):
    """A collective could not complete because another rank had left the job (its process ended)."""


def is_timeout(error: BaseException) -> bool:
    """Return True when `error` is torch's report of a collective that ran past its timeout."""
    if isinstance(error, CollectiveError):
        return False  # already named (and its text may quote a user's "timeout" key); do not wrap
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(mark in text for mark in _TIMEOUT_MARKS)


def _no_description() -> str:
    return f"this rank waited the process group's timeout (Accelerator(timeout=...) or {env_vars.TIMEOUT})"


# Set by the shared state, which knows the rank and the timeout (this module sits below it).
_describe_wait: Callable[[], str] = _no_description


def describe_waits_with(describe: Callable[[], str]) -> None:
    """Make `describe()` the text that says who waited how long, in every timeout error."""
    global _describe_wait
    _describe_wait = describe


_nesting = threading.local()
# Set by accel_state.collectives (above this module): in debug mode, makes the ranks agree on the
# operation (and its sequence number) before one that does not check its inputs itself (a barrier).
_check_entry: Callable[[str], None] | None = None


def check_entries_with(check: Callable[[str], None]) -> None:
    """Make `check(operation)` run on entering each outermost collective that does not check itself."""
    global _check_entry
    _check_entry = check


class named_collective:  # noqa: N801 - used as a function: `with named_collective(...)`
    """Re-raise a collective timeout inside the block as CollectiveTimeoutError naming `operation`.

    Blocks nest (save_state -> barrier): the outermost name, the one the user called, is reported
    and logged (with a summary of `data`, its input). `checks_itself`: the operation exchanges its
    own description across ranks (shape_check), so debug mode adds no check on entry. A class, not
    a generator: it wraps every collective, and this way costs a third as much.
    """

    __slots__ = ("operation", "data", "checks_itself", "depth", "entry")

    def __init__(self, operation: str, data: Any = None, *, checks_itself: bool = False) -> None:
        self.operation, self.data, self.checks_itself = operation, data, checks_itself
        self.depth = 0
        self.entry: collective_log.Entry | None = None

    def __enter__(self) -> None:
        depth = self.depth = getattr(_nesting, "depth", 0)
        _nesting.depth = depth + 1
        if depth == 0:
            # 2: above enter and this method, the `with` statement's function (or our wrapper).
            self.entry = collective_log.enter(self.operation, self.data, 2)
            self.data = None  # keep no reference to the input
            if not self.checks_itself and _check_entry is not None:
                try:
                    _check_entry(self.operation)
                except BaseException as error:  # named as if raised in the block
                    self.__exit__(type(error), error, error.__traceback__)
                    raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        try:
            if isinstance(error, RuntimeError) and self.depth == 0:
                _raise_named(self.operation, error)
        finally:
            self._leave()

    def _leave(self) -> None:
        _nesting.depth = self.depth
        if self.entry is not None:
            collective_log.leave(self.entry)
            self.entry = None


def _raise_named(operation: str, error: RuntimeError) -> None:
    """Raise the error naming `operation` for torch's timeout or lost peer `error` (after writing this
    rank's report); return for any other error, which the caller re-raises as it was."""
    if isinstance(error, CollectiveError):
        return
    lost_peer = rank_exit.is_lost_peer(error)
    if not (lost_peer or is_timeout(error)):
        return
    named = _named_error(operation, error, lost_peer)
    _report_failure(operation, named or error)  # while the log still says where it is
    if named is not None:
        raise named from error


def _named_error(operation: str, error: RuntimeError, lost_peer: bool) -> CollectiveError | None:
    """Return the error naming `operation` for torch's `error` (None: a lost peer nobody marked)."""
    left = rank_exit.ranks_that_left()
    if left:
        if len(left) == 1:
            who = "rank {} left the job ({})".format(*next(iter(left.items())))
        else:
            who = "ranks " + ", ".join(f"{rank} ({how})" for rank, how in sorted(left.items()))
            who += " left the job"
        return RankLeftError(
            f"{operation}: {who} before joining this {operation}; every rank must call "
            f"the same collectives (a rank with fewer batches must still join them). Original "
            f"error: {error}"
        )
    if lost_peer:
        return None
    return CollectiveTimeoutError(
        f"{operation} timed out: {_describe_wait()}, but at least one process never reached "
        f"{operation} (it crashed, hangs, or took another code path). Original error: {error}"
    )


def _report_failure(operation: str, error: BaseException) -> None:
    """Write this rank's diagnosis report (it is about to raise and, most likely, exit)."""
    from accel_state.process_group import diagnosis  # only on this path: a collective that failed

    diagnosis.write_report(f"its {operation} failed", error)


def names_collective(operation: str, *, checks_itself: bool = False) -> Callable[[F], F]:
    """Decorate a function so that a collective timeout inside it names `operation` (its first
    argument is the input the collective log summarises)."""

    check_entry = not checks_itself

    def decorate(function: F) -> F:
        # `named_collective`'s steps written out: the wrapper is on the path of every gather, and
        # each frame and object it leaves out is a cost paid with cold caches after each exchange.
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(_nesting, "depth", 0)
            _nesting.depth = depth + 1
            if depth:  # inside another collective: the outermost one names and logs
                try:
                    return function(*args, **kwargs)
                finally:
                    _nesting.depth = depth
            # 1: above enter, this wrapper.
            entry = collective_log.enter(operation, args[0] if args else None, 1)
            try:
                if check_entry and _check_entry is not None:
                    _check_entry(operation)
                return function(*args, **kwargs)
            except RuntimeError as error:
                _raise_named(operation, error)
                raise
            finally:
                _nesting.depth = 0
                collective_log.leave(entry)

        return wrapper  # type: ignore[return-value]

    return decorate
