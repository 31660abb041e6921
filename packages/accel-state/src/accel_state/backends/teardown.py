"""The backends' one exit teardown: what their objects hold of the process group, let go just
before accel destroys the group (accel_state.process_group.group).

A script that keeps its prepared objects in module globals (as most do) still holds them when that
teardown runs, and they keep the group alive past its destroy: a DDP model's reducer, logger and
own reference; an FSDP model's mesh infos and its device mesh (which torch's DTensor caches keep
alive after the model is gone); a DeepSpeed engine, and the groups DeepSpeed keeps in its module
globals. gloo's threads then run on into the interpreter's final teardown, where they can abort the
process after all of its work. Nothing can use those references once the group is gone.

So a backend hands each such object to `release_at_exit` with how to release it. The objects are
held weakly: what the script dropped needs no release. At exit, once, the backend classes that
held anything, the last one first: every object of theirs still alive is released, in the order
they were held, then the class's `teardown()` runs (for what no object holds: module globals).
A failing release stops none of the others; the group goes in any case.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from accel_state.process_group.group import before_teardown
from accel_state.seam.backend import Backend

T = TypeVar("T")

# Backend class -> the objects held for it (weakly) and how to release each, in the order held.
_held: dict[type[Backend], list[tuple[weakref.ref[Any], Callable[[Any], None]]]] = {}
_hooked = False


def release_at_exit(backend: Backend, held: T, release: Callable[[T], None]) -> None:
    """At exit, before the process group goes, call `release(held)` if `held` is still alive, then
    `backend`'s class `teardown()` (once); holding the same object again changes nothing."""
    entries = tear_down_at_exit(backend)
    entries[:] = [(ref, how) for ref, how in entries if ref() is not None]
    if not any(ref() is held for ref, _ in entries):
        entries.append((weakref.ref(held), release))


def tear_down_at_exit(backend: Backend) -> list[tuple[weakref.ref[Any], Callable[[Any], None]]]:
    """Make `backend`'s class `teardown()` run at exit (once, whatever it holds); return its entries."""
    global _hooked
    if not _hooked:
        before_teardown(teardown_backends)
        _hooked = True
    return _held.setdefault(type(backend), [])


def teardown_backends() -> None:
    """Release what every backend held, then run each backend class's `teardown()`, the last
    registered first; each runs once (what the exit teardown calls)."""
    while _held:
        backend_class, entries = _held.popitem()
        for ref, release in entries:
            held = ref()
            if held is not None:
                _quietly(release, held)
        _quietly(backend_class.teardown)


def _quietly(function: Callable[..., Any], *args: Any) -> None:
    try:
        function(*args)
    except Exception:  # noqa: BLE001 - at exit nothing is left to report it to; the others must run
        pass
