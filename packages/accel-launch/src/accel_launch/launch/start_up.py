"""The launcher's start-up imports (torch and its elastic agent) without Python's full collections.

Importing torch makes some 300,000 objects that live as long as the launcher does. Python's
automatic collection walks all of them again whenever enough new ones have piled up: measured on a
2-core machine, two or three full collections of 35-60 ms each while the launcher imports torch,
before it starts a single worker (torchrun pays two of them; accel's own imports tipped it into a
third). None of them can find garbage among objects that are still being imported.

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
