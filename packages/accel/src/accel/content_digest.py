"""A hash of what a checkpoint file holds (its tensors and structure), fast enough for every load.

Hashing a file's bytes with sha256 runs at about 1 GB/s on one core, which more than doubles the
time to load a large checkpoint. This digest checks what matters instead: that the objects a file
gives back are the ones that were saved. Each tensor's bytes go through xxh3-128 (xxhash), a hash
made for checking data at memory speed (about 20 GB/s on one core, outside the GIL), read in place
from the tensor's memory; the structure around them (keys, numbers, strings, dtypes, shapes) and
each tensor's 128-bit digest then go through one more xxh3-128. Any change to the bytes, their
order included, changes the result; each tensor's own digest is kept too, so that a check that
fails can name the tensor.

`DIGEST_NAME` is recorded in every checkpoint. Checkpoints written before it (`accel-content-v1`,
block sums) are still checked with their own algorithm (`accel.content_digest_v1`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import xxhash

DIGEST_NAME = "accel-content-v2-xxh3-128"


@dataclasses.dataclass(frozen=True)
class Digest:
    """The digest of a whole object, and of each tensor in it by its path (`state.0.exp_avg`)."""

    whole: str
    tensors: dict[str, str]


def content_digest(obj: Any) -> str:
    """Return a hex digest of `obj` (nested containers of tensors and plain values).

    Equal for an object before `torch.save`/safetensors and after loading it back, on any device;
    dict key order does not matter (safetensors reorders keys).
    """
    return digest_of(obj).whole


def digest_of(obj: Any) -> Digest:
    """Return the digest of `obj` and of each tensor in it."""
    whole = xxhash.xxh3_128()
    tensors: dict[str, str] = {}
    _feed(whole, tensors, (), obj)
    return Digest(whole.hexdigest(), tensors)


def tensor_path(path: tuple[Any, ...]) -> str:
    """Return how a tensor's place in an object is written: its keys and indices joined by dots."""
    return ".".join(str(part) for part in path)


def _feed(hasher: Any, tensors: dict[str, str], path: tuple[Any, ...], obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        digest = tensor_digest(obj)
        name = tensor_path(path)
        while name in tensors:  # two paths that print alike ("a.b" and a -> b): keep both
            name += "'"
        tensors[name] = digest.hex()
        hasher.update(b"T" + digest)
    elif isinstance(obj, Mapping):
        hasher.update(f"D{len(obj)}:".encode())
        for key in sorted(obj, key=repr):
            _feed(hasher, tensors, path, key)
            _feed(hasher, tensors, (*path, key), obj[key])
    elif isinstance(obj, list | tuple):
        hasher.update(f"{'L' if isinstance(obj, list) else 'U'}{len(obj)}:".encode())
        for index, item in enumerate(obj):
            _feed(hasher, tensors, (*path, index), item)
    elif isinstance(obj, set | frozenset):
        hasher.update(f"S{len(obj)}:".encode())
        for text in sorted(repr(item) for item in obj):
            hasher.update(text.encode() + b";")
    else:
        hasher.update(f"{type(obj).__name__}={obj!r};".encode())


def tensor_digest(tensor: torch.Tensor) -> bytes:
    """Return the 16-byte xxh3-128 of a tensor's dtype, shape and bytes (read in place when it can)."""
    hasher = xxhash.xxh3_128(f"{tensor.dtype}{tuple(tensor.shape)}:".encode())
    hasher.update(tensor_bytes(tensor))
    return hasher.digest()


def tensor_bytes(tensor: torch.Tensor) -> Any:
    """Return a buffer of the tensor's bytes in row-major order: its own memory when it is a
    contiguous CPU tensor, else a contiguous CPU copy. Any dtype (bf16, float8, bool, complex), since
    the bytes are viewed as uint8."""
    data = tensor.detach()
    if data.device.type == "meta":
        return b"meta"
    if data.is_quantized:
        data = data.int_repr()
    if data.layout != torch.strided:
        data = data.to_dense()
    data = data.resolve_conj().resolve_neg()
    if data.device.type != "cpu":
        data = data.cpu()
    if data.numel() == 0:
        return b""
    return data.contiguous().reshape(-1).view(torch.uint8).numpy()
