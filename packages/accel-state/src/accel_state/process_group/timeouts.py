"""Collective timeouts that say which operation timed out.

When a rank never reaches a collective, gloo fails the others after the process group's timeout
with a message about its own transport ("Timed out waiting 3000ms for recv operation to
complete"), naming no accel operation. `named_collective` turns that into a
`CollectiveTimeoutError` naming the operation, this rank, and the setting that controls the wait.
When a rank left the job instead (it ended while the others still call collectives), gloo fails the
others with "Connection closed by peer"; the ranks that left marked it in the job's store
(`accel_state.process_group.rank_exit`), and the error becomes a `RankLeftError` naming them and the
operation.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from accel_state.environment import env_vars
from accel_state.process_group import rank_exit

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


@contextlib.contextmanager
def named_collective(operation: str) -> Iterator[None]:
    """Re-raise a collective timeout inside the block as CollectiveTimeoutError naming `operation`.

    Blocks nest (save_state -> barrier): the outermost name, the one the user called, is reported.
    """
    depth = getattr(_nesting, "depth", 0)
    _nesting.depth = depth + 1
    try:
        yield
    except RuntimeError as error:
        if depth > 0 or isinstance(error, CollectiveError):
            raise
        lost_peer = rank_exit.is_lost_peer(error)
        if not (lost_peer or is_timeout(error)):
            raise
        left = rank_exit.ranks_that_left()
        if left:
            if len(left) == 1:
                who = "rank {} left the job ({})".format(*next(iter(left.items())))
            else:
                who = "ranks " + ", ".join(f"{rank} ({how})" for rank, how in sorted(left.items()))
                who += " left the job"
            raise RankLeftError(
                f"{operation}: {who} before joining this {operation}; every rank must call "
                f"the same collectives (a rank with fewer batches must still join them). Original "
                f"error: {error}"
            ) from error
        if lost_peer:
            raise
        raise CollectiveTimeoutError(
            f"{operation} timed out: {_describe_wait()}, but at least one process never reached "
            f"{operation} (it crashed, hangs, or took another code path). Original error: {error}"
        ) from error
    finally:
        _nesting.depth = depth


def names_collective(operation: str) -> Callable[[F], F]:
    """Decorate a function so that a collective timeout inside it names `operation`."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with named_collective(operation):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
