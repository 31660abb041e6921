"""Safetensors files read through a memory map and written as a stream.

Tensors read here are views of a private (copy-on-write) mapping of the file: their pages belong to
the page cache, not to the process's anonymous memory, so reading a shard or an offloaded module costs
no RAM the kernel cannot take back. Writing streams one tensor at a time, never the whole file in memory.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from accel_big_modeling.errors import BigModelingError

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U64": torch.uint64,
    "U32": torch.uint32,
    "U16": torch.uint16,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "C64": torch.complex64,
}
CODES = {dtype: code for code, dtype in DTYPES.items()}
_MAX_HEADER = 100 * 2**20


class TensorInfo:
    """Where one tensor lies in a safetensors file."""

    __slots__ = ("dtype", "shape", "start", "end")

    def __init__(self, dtype: torch.dtype, shape: tuple[int, ...], start: int, end: int) -> None:
        self.dtype, self.shape, self.start, self.end = dtype, shape, start, end


def _parse_entry(path: Path, name: str, entry: Any, data_size: int) -> TensorInfo:
    try:
        dtype = DTYPES[entry["dtype"]]
        shape = tuple(int(n) for n in entry["shape"])
        start, end = (int(n) for n in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise BigModelingError(f"corrupt safetensors file {path}: bad header entry for {name!r}") from None
    count = 1
    for n in shape:
        count *= n
    if not 0 <= start <= end <= data_size or end - start != count * dtype.itemsize:
        raise BigModelingError(
            f"corrupt safetensors file {path}: {name!r} lies outside the file or has a wrong size"
        )
    return TensorInfo(dtype, shape, start, end)


def read_header(path: str | os.PathLike[str]) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Return the tensors of a safetensors file, its metadata and data offset; raise naming a bad file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise BigModelingError(
                    f"corrupt safetensors file {path}: shorter than its 8-byte header size"
                )
            (length,) = struct.unpack("<Q", prefix)
            if length > min(_MAX_HEADER, size - 8):
                raise BigModelingError(
                    f"corrupt safetensors file {path}: header size {length} exceeds the file"
                )
            header = json.loads(handle.read(length))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BigModelingError(f"corrupt safetensors file {path}: {error}") from None
    if not isinstance(header, dict):
        raise BigModelingError(f"corrupt safetensors file {path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + length
    infos = {name: _parse_entry(path, name, entry, size - data_start) for name, entry in header.items()}
    return infos, dict(metadata), data_start


class MappedSafetensors:
    """A safetensors file whose tensors are views of one private memory map (no copy, no anonymous memory)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.infos, self.metadata, self._data_start = read_header(self.path)
        self._map: mmap.mmap | None = None

    def keys(self) -> list[str]:
        """Return the tensor names in file order."""
        return list(self.infos)

    def get(self, name: str) -> torch.Tensor:
        """Return tensor `name` as a view of the file's pages (writes stay private to this process)."""
        info = self.infos[name]
        if info.end == info.start:
            return torch.empty(info.shape, dtype=info.dtype)
        if self._map is None:
            with open(self.path, "rb") as handle:
                # ACCESS_COPY: writable for torch, copy-on-write, never written back to the file.
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        count = (info.end - info.start) // info.dtype.itemsize
        flat = torch.frombuffer(
            self._map, dtype=info.dtype, count=count, offset=self._data_start + info.start
        )
        return flat.view(info.shape)


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data if flat.numel() else memoryview(b"")


def write_safetensors(
    path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    """Write `tensors` to `path` in safetensors format, one tensor at a time, atomically."""
    path = Path(path)
    # Largest elements first keeps every tensor aligned to its element size.
    order = sorted(tensors, key=lambda name: (-tensors[name].dtype.itemsize, name))
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name in order:
        tensor = tensors[name]
        if tensor.dtype not in CODES:
            raise BigModelingError(f"cannot offload {name!r}: dtype {tensor.dtype} has no safetensors code")
        nbytes = tensor.numel() * tensor.dtype.itemsize
        header[name] = {
            "dtype": CODES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for name in order:
            handle.write(_raw_bytes(tensors[name]))
    os.replace(temporary, path)


def iter_items(mapped: MappedSafetensors) -> Iterable[tuple[str, torch.Tensor]]:
    """Yield (name, mapped tensor) for every tensor of the file."""
    for name in mapped.keys():
        yield name, mapped.get(name)
