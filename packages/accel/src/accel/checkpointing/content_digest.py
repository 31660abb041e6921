"""A hash of what a checkpoint file holds (its tensors and structure), fast enough for every load.

Hashing a file's bytes with sha256 runs at about 1 GB/s on one core, which more than doubles the
time to load a large checkpoint. This digest checks what matters instead: that the objects a file
gives back are the ones that were saved. Each tensor's bytes go through xxh3-128 (xxhash), a hash
made for checking data at memory speed (about 20 GB/s on one core, outside the GIL), read in place
from the tensor's memory; a tensor's digest is the xxh3-128 of its dtype, shape and its bytes'
xxh3-128. The structure around the tensors (keys, numbers, strings) and each
tensor's digest then go through one more xxh3-128. Any change to the bytes, their order included,
changes the result; each tensor's own digest is kept too, so that a check that fails can name the
tensor. Large objects are hashed on several threads.

`DIGEST_NAME` is recorded in every checkpoint. Checkpoints written before it are still checked with
their own algorithm: `DIGEST_V2` (each tensor's dtype, shape and bytes in one xxh3-128) here, and
`accel-content-v1` (block sums) by `accel.content_digest_v1`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
import xxhash

DIGEST_NAME = "accel-content-v3-xxh3-128"
DIGEST_V2 = "accel-content-v2-xxh3-128"


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


def digest_of(obj: Any, algorithm: str = DIGEST_NAME) -> Digest:
    """Return the digest of `obj` and of each tensor in it.

    The tensors of a large object are hashed on several threads (xxhash runs outside the GIL).
    `algorithm` is `DIGEST_NAME` or, to check an older checkpoint, `DIGEST_V2`.
    """
    found: list[tuple[str, torch.Tensor]] = []
    structure = xxhash.xxh3_128()
    _feed(structure, found, (), obj)
    tensors = [t for _, t in found]
    digest: Callable[[torch.Tensor], bytes] = tensor_digest_v2 if algorithm == DIGEST_V2 else tensor_digest
    size = sum(t.numel() * t.element_size() for t in tensors)
    if len(tensors) > 1 and size >= _PARALLEL_BYTES:
        digests = list(_hashing_pool().map(digest, tensors))
    else:
        digests = list(map(digest, tensors))
    whole = xxhash.xxh3_128(structure.digest())
    by_path: dict[str, str] = {}
    for (name, _), one in zip(found, digests, strict=True):
        whole.update(one)
        while name in by_path:  # two paths that print alike ("a.b" and a -> b): keep both
            name += "'"
        by_path[name] = one.hex()
    return Digest(whole.hexdigest(), by_path)


_PARALLEL_BYTES = 16 << 20
_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _hashing_pool() -> concurrent.futures.ThreadPoolExecutor:
    """Return this process's hashing threads (a forked child gets its own)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        workers = max(1, min(4, os.cpu_count() or 1))
        _pool = (os.getpid(), concurrent.futures.ThreadPoolExecutor(workers, "accel-digest"))
    return _pool[1]


def tensor_path(path: tuple[Any, ...]) -> str:
    """Return how a tensor's place in an object is written: its keys and indices joined by dots."""
    return ".".join(str(part) for part in path)


def _feed(hasher: Any, found: list[tuple[str, torch.Tensor]], path: tuple[Any, ...], obj: Any) -> None:
    """Hash the structure of `obj` into `hasher`, a mark in each tensor's place; note each tensor
    (with its path) in `found`, in order."""
    if isinstance(obj, torch.Tensor):
        found.append((tensor_path(path), obj))
        hasher.update(b"T")
    elif isinstance(obj, Mapping):
        hasher.update(f"D{len(obj)}:".encode())
        for key in sorted(obj, key=repr):
            _feed(hasher, found, path, key)
            _feed(hasher, found, (*path, key), obj[key])
    elif isinstance(obj, list | tuple):
        hasher.update(f"{'L' if isinstance(obj, list) else 'U'}{len(obj)}:".encode())
        for index, item in enumerate(obj):
            _feed(hasher, found, (*path, index), item)
    elif isinstance(obj, set | frozenset):
        hasher.update(f"S{len(obj)}:".encode())
        for text in sorted(repr(item) for item in obj):
            hasher.update(text.encode() + b";")
    else:
        hasher.update(f"{type(obj).__name__}={obj!r};".encode())


def tensor_digest(tensor: torch.Tensor) -> bytes:
    """Return a tensor's 16-byte digest: the xxh3-128 of its dtype, shape and the xxh3-128 of its
    bytes (read in place when it can)."""
    bytes_digest = xxhash.xxh3_128(tensor_bytes(tensor)).digest()
    return xxhash.xxh3_128(f"{tensor.dtype}{tuple(tensor.shape)}:".encode() + bytes_digest).digest()


def tensor_digest_v2(tensor: torch.Tensor) -> bytes:
    """Return a tensor's digest as `DIGEST_V2` defined it: one xxh3-128 of its dtype, shape and bytes."""
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
