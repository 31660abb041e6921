"""Which ranks left the job: each marks its exit in the job's store, and a collective that lost a
peer reads the marks to say who left.

A rank that ends while the others still wait in a collective (its script returned, or called
`sys.exit`, after fewer batches than the others) tears its process group down at exit, and gloo
fails the others with "Connection closed by peer [127.0.0.1]:20667": an address, not a rank, and
not whether it crashed. So just before that teardown each rank writes `accel/left/<rank>` into the
job's store (how it ended: it exited, or it stopped on an uncaught exception), and a rank whose
collective failed on a lost connection looks those keys up.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch.distributed as dist

_PREFIX = "accel/left/"
# Substrings of gloo's (and the TCP store's) reports of a peer whose connection went away.
_LOST_PEER_MARKS = ("connection closed by peer", "connection reset by peer", "broken pipe")
_uncaught: str | None = None  # the exception that ends this process, once sys.excepthook saw it
_hook_installed = False
_previous_hook = sys.excepthook


def _store() -> Any:
    """Return the default process group's store, or None when there is none."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        # torch exposes the default group's store only through this private accessor.
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a group without a store (a custom backend): nothing to mark
        return None


def _remember_uncaught(
    kind: type[BaseException], error: BaseException, trace: types.TracebackType | None
) -> None:
    global _uncaught
    _uncaught = f"it stopped on an uncaught {kind.__name__}: {error}".splitlines()[0][:200]
    _previous_hook(kind, error, trace)


def watch_uncaught_exceptions() -> None:
    """Remember the exception that ends this process (if one does), for the exit mark."""
    global _hook_installed, _previous_hook
    if not _hook_installed:
        _previous_hook = sys.excepthook
        sys.excepthook = _remember_uncaught
        _hook_installed = True


def mark_exit() -> None:
    """Write in the job's store that this rank leaves, and how (at exit, before the teardown)."""
    store = _store()
    if store is None or dist.get_world_size() < 2:
        return
    try:
        store.set(f"{_PREFIX}{dist.get_rank()}", _uncaught or "it exited")
    except Exception:  # noqa: BLE001 - the store's host may be gone already; the others get gloo's error
        pass


def is_lost_peer(error: BaseException) -> bool:
    """Return True when `error` is torch's report of a peer whose connection closed."""
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(mark in text for mark in _LOST_PEER_MARKS)


def ranks_that_left() -> dict[int, str]:
    """Return each other rank that marked its exit, with how it ended (empty when none did or the
    store cannot be reached)."""
    store = _store()
    if store is None:
        return {}
    left = {}
    try:
        for rank in range(dist.get_world_size()):
            key = f"{_PREFIX}{rank}"
            if rank != dist.get_rank() and store.check([key]):
                left[rank] = store.get(key).decode(errors="replace")
    except Exception:  # noqa: BLE001 - the store's host left too: say nothing rather than guess
        return {}
    return left
