"""A progress bar for a long `save_state`, `load_state` or `accel merge-weights`: the bytes of the
files written or read.

Shown only where someone watches it: on the main process, when its standard error is a terminal,
tqdm is installed and the operation still runs after `DELAY_SECONDS` (a short save prints
nothing); `ACCEL_PROGRESS=0` turns it off. It moves a file at a time.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from accel_state.environment import env_vars

DELAY_SECONDS = 2.0


def _watched() -> bool:
    """True when a person can see standard error and has not turned bars off."""
    if os.environ.get(env_vars.PROGRESS, "").strip().lower() in {"0", "false", "no", "off"}:
        return False
    stream = sys.stderr
    return stream is not None and callable(getattr(stream, "isatty", None)) and stream.isatty()


class Progress:
    """Counts the bytes done; a tqdm bar shows them where one is wanted (see the module)."""

    def __init__(self, what: str, total_bytes: int | None, shown: bool) -> None:
        self._bar: Any = None
        self.what = what
        self.done_bytes = 0  # counted while a bar is shown
        self._lock = threading.Lock()  # files finish on the writing thread and the caller's
        if not shown or not _watched():
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(
            total=total_bytes, desc=what, unit="B", unit_scale=True, unit_divisor=1024, delay=DELAY_SECONDS,
            leave=False, file=sys.stderr,
        )  # fmt: skip

    def advance(self, done_bytes: int) -> None:
        """Note `done_bytes` more bytes written or read."""
        if self._bar is not None:
            with self._lock:
                self.done_bytes += done_bytes
                self._bar.update(done_bytes)

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def close(self) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.close()
            self._bar = None


NO_PROGRESS = Progress("", None, shown=False)
