"""The launcher's start-up imports (torch and its elastic agent) without Python's full collections.

Importing torch and its agent leaves some 170,000 objects for the collector to track, and they live as
long as the launcher does. Python's automatic full collections walk all of them again whenever
enough new ones have piled up: measured on a 2-core machine, torchrun's launcher runs two while it
imports (35 ms in all), accel's ran three (95-130 ms: its own imports tipped it into a third), all
before a single worker starts, and the interpreter walks them once more as it exits. None of them
can find garbage among objects that are still being imported.

So the launcher defers collection while it imports, then freezes what it imported (moves it out
of the collector's generations: later collections never walk it again) and collects as usual while
the job runs. This is the launcher's own process; the workers are fresh interpreters whose
collection is theirs.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def imports_without_collection() -> Iterator[None]:
    """Run the block with automatic collection off, then freeze what it made and turn collection back on
    (if it was on: a nested use leaves that to the outer one)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
