"""Where the shared-state singletons keep their dictionaries: one per process, or one per thread.

`PartialState`, `AcceleratorState` and `GradientState` share one dictionary among all their
instances. Under XLA on a CPU host the replicas of a job can be threads of one process, each its
own rank, so a backend may ask (`use_per_thread_state`) for a dictionary per thread instead.
"""

from __future__ import annotations

import threading
from typing import Any

_process_dicts: dict[str, dict[str, Any]] = {}
_thread_dicts = threading.local()
_per_thread = False


def use_per_thread_state(enabled: bool = True) -> None:
    """Give every thread its own shared state from now on (XLA replicas that are threads)."""
    global _per_thread
    _per_thread = enabled


def per_thread_state() -> bool:
    """Return True when each thread has its own shared state."""
    return _per_thread


def shared_dict(owner: str) -> dict[str, Any]:
    """Return the dictionary that every instance of `owner` shares in this process (or thread)."""
    if not _per_thread:
        return _process_dicts.setdefault(owner, {})
    dicts = getattr(_thread_dicts, "dicts", None)
    if dicts is None:
        dicts = _thread_dicts.dicts = {}
    return dicts.setdefault(owner, {})


class SharedDict:
    """Class attribute holding the owning class's shared dictionary (`cls._shared_state`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"{owner.__module__}.{owner.__qualname__}"
        self.process_dict = _process_dicts.setdefault(self.key, {})

    def __get__(self, instance: object, owner: type) -> dict[str, Any]:
        # Read on every collective (each builds its state): the per-process dict without a call.
        return shared_dict(self.key) if _per_thread else self.process_dict
