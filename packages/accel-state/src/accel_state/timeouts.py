"""Collective timeouts that say which operation timed out.

When a rank never reaches a collective, gloo fails the others after the process group's timeout
with a message about its own transport ("Timed out waiting 3000ms for recv operation to
complete"), naming no accel operation. `named_collective` turns that into a
`CollectiveTimeoutError` naming the operation, this rank, and the setting that controls the wait.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from accel_state import env_vars

F = TypeVar("F", bound=Callable[..., Any])
# Substrings of the errors torch raises on a collective timeout (gloo, NCCL watchdog, store).
_TIMEOUT_MARKS = ("timed out", "timeout", "watchdog caught collective operation")


class CollectiveTimeoutError(RuntimeError):
    """A collective did not complete in time: some process never reached it."""


def is_timeout(error: BaseException) -> bool:
    """Return True when `error` is torch's report of a collective that ran past its timeout."""
    if isinstance(error, CollectiveTimeoutError):
        return False  # already named; do not wrap twice
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(mark in text for mark in _TIMEOUT_MARKS)


def _describe_wait() -> str:
    from accel_state.partial_state import PartialState

    state = PartialState()
    seconds = state.timeout.total_seconds()
    return (
        f"rank {state.process_index} of {state.num_processes} waited {seconds:g} s (the process group's "
        f"timeout: Accelerator(timeout=...) or {env_vars.TIMEOUT})"
    )


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
        if depth > 0 or not is_timeout(error):
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
