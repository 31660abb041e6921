"""The checksums of checkpoint files, computed on a second thread.

Tensor files are checked by the digest of what they hold (`content_digest`, near memory speed);
small JSON files and files written by hooks by the sha256 of their bytes.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            sha.update(chunk)
    return sha.hexdigest()


# Digests are computed on a second thread while files are written or read: writing and reading
# wait on the kernel and the disk, the digest on memory bandwidth, so checks cost little wall time.
_threads: dict[str, tuple[int, concurrent.futures.ThreadPoolExecutor]] = {}


def thread_named(name: str) -> concurrent.futures.ThreadPoolExecutor:
    """Return this process's thread `name` (a forked child gets its own)."""
    found = _threads.get(name)
    if found is None or found[0] != os.getpid():
        found = (os.getpid(), concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name))
        _threads[name] = found
    return found[1]


def check_later(function: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """Run `function(*args)` on this process's checking thread."""
    return thread_named("accel-ckpt-check").submit(function, *args)


def write_later(function: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """Run `function(*args)` on this process's writing thread (a file written while the caller
    writes the next)."""
    return thread_named("accel-ckpt-write").submit(function, *args)
