"""Writing the files of a checkpoint: each write's failure named, each file's check noted.

A failed write names its file and cause ("no space left on device while writing ...",
CheckpointWriteError); files follow the umask. Tensor files are written straight to disk, and
their content digest (and each tensor's) is computed meanwhile on the checking thread.
safetensors files are written on a thread of their own (safetensors writes outside the GIL) while
the caller goes on with the next file: a save writes its model and its optimizer at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.content_digest import digest_of
from accel.checkpointing.digests import check_later, write_later
from accel.checkpointing.errors import CheckpointError, CheckpointWriteError
from accel_launch.checkpoints.progress import NO_PROGRESS, Progress


def _file_mode() -> int:
    """Return the mode open() gives a new file under this process's umask."""
    with contextlib.suppress(OSError):  # /proc gives the umask without changing it (threads)
        match = re.search(r"^Umask:\s*([0-7]+)", Path("/proc/self/status").read_text(), re.MULTILINE)
        if match:
            return 0o666 & ~int(match.group(1), 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _os_errno(error: BaseException) -> int | None:
    """Return the errno behind a failed write: an OSError's, or safetensors' "(os error N)"."""
    seen: BaseException | None = error
    for _ in range(8):  # the chain of causes, not a cycle
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno:
            return seen.errno
        match = re.search(r"\(os error (\d+)\)", str(seen))
        if match:
            return int(match.group(1))
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def writing(path: Path, doing: str = "writing") -> Iterator[None]:
    """Turn an OS error inside the block into CheckpointWriteError naming `path` and its cause."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        code = _os_errno(error)
        if code is None:
            raise
        reason = "no space left on device" if code == errno.ENOSPC else os.strerror(code).lower()
        raise CheckpointWriteError(f"{reason} while {doing} {path}") from error


_ZIP_CHECKSUM_SETTING = threading.Lock()


@contextlib.contextmanager
def _without_zip_checksums() -> Iterator[None]:
    """Let torch.save skip the zip CRC32 of every record while the block runs.

    torch.load never reads those checksums, and checkpoint.json's xxh3-128 digests check every
    byte of the file; computing them took more than half of a torch.save of a 20 MB optimizer
    state. The setting is torch's global one: restored afterwards, and changed by one thread at a
    time (torch < 2.5 has none, and computes them).
    """
    getter = getattr(torch.serialization, "get_crc32_options", None)
    setter = getattr(torch.serialization, "set_crc32_options", None)
    if getter is None or setter is None:
        yield
        return
    with _ZIP_CHECKSUM_SETTING:
        before = getter()
        setter(False)
        try:
            yield
        finally:
            setter(before)


def write_torch_file(path: Path, obj: Any, *, zip_checksums: bool = True) -> None:
    """torch.save `obj` into `path` through a Python file (torch's own writer reports a full disk as
    "unexpected pos", without the cause). A checkpoint's files, whose digests checkpoint.json
    records, go without zip checksums (`_without_zip_checksums`); files for other tools keep them."""
    skipping = _without_zip_checksums() if not zip_checksums else contextlib.nullcontext()
    with writing(path), path.open("wb", buffering=0) as handle, skipping:
        torch.save(obj, handle)


def write_safetensors_file(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write a safetensors file whose mode follows the umask (safetensors creates its files 0600)."""
    from safetensors.torch import save_file

    with writing(path):
        save_file(tensors, str(path), metadata=metadata)
        os.chmod(path, _file_mode())


def compact_json(obj: Any) -> bytes:
    """Return `obj` as JSON bytes, keys sorted, without indentation: json's C encoder runs only
    without `indent` (indented, a checkpoint's metadata took a save about half a millisecond)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def write_bytes_file(path: Path, data: bytes) -> None:
    with writing(path):
        path.write_bytes(data)


# Tensor files smaller than this are written and checked on the caller's thread (see write_safetensors).
INLINE_BYTES = 1 << 20


def _done(value: Any) -> concurrent.futures.Future[Any]:
    """Return a future that already holds `value`."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future


def _content_check(obj: Any) -> dict[str, Any]:
    digest = digest_of(obj)
    return {"content": digest.whole, "tensors": digest.tensors}


class FolderWriter:
    """Writes the files of one checkpoint into its temporary folder and notes how to check each."""

    def __init__(self, folder: Path, progress: Progress = NO_PROGRESS) -> None:
        self.folder = folder
        self.progress = progress
        self._checks: dict[str, concurrent.futures.Future[dict[str, Any]]] = {}
        self._writes: list[concurrent.futures.Future[None]] = []

    def _check_content(self, name: str, obj: Any) -> None:
        self._checks[name] = check_later(_content_check, obj)

    def _advance(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            self.progress.advance(path.stat().st_size)

    def _advance_unless_failed(self, write: concurrent.futures.Future[None], path: Path) -> None:
        if write.exception() is None:
            self._advance(path)

    def write_torch(self, name: str, obj: Any) -> None:
        self._check_content(name, obj)
        write_torch_file(self.folder / name, obj, zip_checksums=False)
        self._advance(self.folder / name)

    def write_safetensors(
        self, name: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
    ) -> None:
        if sum(t.numel() * t.element_size() for t in tensors.values()) < INLINE_BYTES:
            # Small (random states): written and checked here, cheaper than waking two threads.
            self._checks[name] = _done(_content_check((tensors, metadata)))
            write_safetensors_file(self.folder / name, tensors, metadata)
            self._advance(self.folder / name)
            return
        self._check_content(name, (tensors, metadata))
        write = write_later(write_safetensors_file, self.folder / name, tensors, metadata)
        write.add_done_callback(lambda done: self._advance_unless_failed(done, self.folder / name))
        self._writes.append(write)

    def write_json(self, name: str, obj: Any) -> None:
        data = compact_json(obj)
        write_bytes_file(self.folder / name, data)
        self._checks[name] = _done({"sha256": hashlib.sha256(data).hexdigest()})

    def settle(self) -> None:
        """Wait until no write or check of this writer runs any more, whatever their outcome."""
        running: list[concurrent.futures.Future[Any]] = [*self._writes, *self._checks.values()]
        concurrent.futures.wait(running)

    def checks(self) -> dict[str, dict[str, Any]]:
        """Return {file name: {"content": hex digest, "tensors": {path: hex digest}} or {"sha256": hex
        digest}} of the files written, once every write is done (its failure is raised here)."""
        self.settle()
        for write in self._writes:
            write.result()
        return {name: future.result() for name, future in self._checks.items()}
