"""Lets DeepSpeed's engines and groups go before the process group is torn down at exit.

accel tears the process group down at exit (accel_state.process_group), after a garbage
collection, because gloo groups still alive when the interpreter finalizes can abort the process
after all of its work. DeepSpeed keeps groups where that collection cannot reach them: in its
module globals (the clone of the world group every ZeRO optimizer reduces over) and in engines a
script still references. Run just before that teardown (`before_teardown`), this destroys every
engine (hooks, buffers) and drops DeepSpeed's references to groups, so that the collection that
follows frees them.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any

from accel_state.process_group import before_teardown

_engines: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False


def release_at_exit(engine: Any) -> None:
    """Destroy `engine` (if still alive) at exit, before the process group goes."""
    global _registered
    _engines.add(engine)
    if not _registered:
        before_teardown(_release)
        _registered = True


def _release() -> None:
    for engine in list(_engines):
        with contextlib.suppress(Exception):  # one engine's failure must not keep the groups alive
            engine.destroy()
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is not None:
        for name, value in list(vars(groups).items()):
            if name.startswith("_") and name.endswith("_GROUP"):
                setattr(groups, name, {} if isinstance(value, dict) else None)
        if getattr(groups, "mesh_device", None) is not None:
            setattr(groups, "mesh_device", None)  # noqa: B010 - a module attribute mypy cannot see
