"""Environment variables as Accelerate's helpers set and read them: `patch_environment`, `str_to_bool`."""

from __future__ import annotations

import contextlib
from typing import Any

from accel_state.environment import env_vars


def patch_environment(**kwargs: Any) -> contextlib.AbstractContextManager[None]:
    """Set environment variables (names upper-cased, values as strings) inside the block, then
    restore what was there before (Accelerate's helper)."""
    return env_vars.patched({key.upper(): str(value) for key, value in kwargs.items()})


_TRUE_WORDS = ("y", "yes", "t", "true", "on", "1")
_FALSE_WORDS = ("n", "no", "f", "false", "off", "0")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """Return 1 for a yes-word (`y`, `yes`, `t`, `true`, `on`, `1`) and 0 for a no-word, as bools
    with `to_bool` (Accelerate's helper for flags read from the environment)."""
    word = str(value).strip().lower()
    if word in _TRUE_WORDS:
        return True if to_bool else 1
    if word in _FALSE_WORDS:
        return False if to_bool else 0
    raise ValueError(f"str_to_bool: {value!r} is neither a yes-word ({', '.join(_TRUE_WORDS)}) nor a no-word")
