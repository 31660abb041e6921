"""A torch file read for `torch.load` whose storages are hashed while they arrive.

`torch.load` of a file object reads each tensor storage with one `readinto` straight into the
storage's own memory. `StreamedFile` reads that record in chunks and hands each chunk, still in the
processor's cache, to a hashing thread while it reads the next, so that a load's content check costs
no second pass over memory after the load: once the load returns, the bytes' digest of every storage
is known by its address (`bytes_digest`), and the content digest (`digest_of(..., known=...)`) only
combines them.

Memory: a chunk is hashed from the storage's memory after `readinto` returned. Every storage read
is referenced by the object being loaded (or, when the load fails, by the frames of its traceback)
until `torch.load` is left, and `finish` waits for every hash before the caller goes on: use the
file as a context manager around the load.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import io
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import xxhash

from accel.checkpointing.digests import thread_named

# Reads this large are storages: hashed in chunks that fit the cache. Smaller reads (the zip
# directory, the pickle, scalar storages) are left to the content digest.
STREAMED_BYTES = 1 << 16
CHUNK_BYTES = 1 << 20  # one thread hashes them, so that a storage's chunks go through its hasher in order


class StreamedFile(io.RawIOBase):
    """A read-only file whose large reads are hashed on a second thread as they land in memory."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        self._hashers: dict[int, tuple[int, Any]] = {}
        self._pending: list[concurrent.futures.Future[None]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if view.nbytes < STREAMED_BYTES or view.readonly:
            return self._file.readinto(view)
        hasher = xxhash.xxh3_128()
        done = 0
        while done < view.nbytes:
            chunk = view[done : done + CHUNK_BYTES]
            got = self._file.readinto(chunk)
            if not got:
                break
            self._pending.append(thread_named("accel-read-hash").submit(hasher.update, chunk[:got]))
            done += got
        self._hashers[_address(view)] = (done, hasher)
        return done

    def finish(self) -> None:
        """Wait until every chunk read so far is hashed."""
        for future in self._pending:
            future.result()
        self._pending.clear()

    def close(self) -> None:
        self.finish()
        self._file.close()
        super().close()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def bytes_digest(self, tensor: torch.Tensor) -> bytes | None:
        """Return the xxh3-128 of `tensor`'s bytes if they are a whole storage this file read, else None."""
        if (
            tensor.device.type != "cpu"
            or tensor.layout != torch.strided
            or tensor.is_quantized
            or tensor.is_conj()
            or tensor.is_neg()
            or tensor.storage_offset() != 0
            or not tensor.is_contiguous()
        ):
            return None
        storage = tensor.untyped_storage()
        entry = self._hashers.get(storage.data_ptr())
        if (
            entry is None
            or entry[0] != storage.nbytes()
            or tensor.numel() * tensor.element_size() != entry[0]
        ):
            return None
        return entry[1].digest()


def _address(view: memoryview) -> int:
    """Return the address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))
