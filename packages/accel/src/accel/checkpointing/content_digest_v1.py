"""The content digest of checkpoints written before xxh3 (`accel-content-v1`), to check them on load.

Each tensor's bytes were read as 64-bit words and summed in blocks of 32 KiB, the block sums
combined with position weights. Weaker than its successor (`accel.checkpointing.content_digest`): words
reordered inside one block give the same sums. New checkpoints never use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

DIGEST_NAME = "accel-content-v1"  # the name such checkpoints record
_BLOCK_WORDS = 4096
_SMALL_BYTES = 1 << 16


def content_digest_v1(obj: Any) -> str:
    """Return the v1 hex digest of `obj` (nested containers of tensors and plain values)."""
    sha = hashlib.sha256()
    _feed(sha, obj)
    return sha.hexdigest()


def _feed(sha: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        sha.update(f"T{obj.dtype}{tuple(obj.shape)}:".encode())
        sha.update(_tensor_sums(obj))
    elif isinstance(obj, Mapping):
        sha.update(f"D{len(obj)}:".encode())
        for key in sorted(obj, key=repr):
            _feed(sha, key)
            _feed(sha, obj[key])
    elif isinstance(obj, list | tuple):
        sha.update(f"{'L' if isinstance(obj, list) else 'U'}{len(obj)}:".encode())
        for item in obj:
            _feed(sha, item)
    elif isinstance(obj, set | frozenset):
        sha.update(f"S{len(obj)}:".encode())
        for text in sorted(repr(item) for item in obj):
            sha.update(text.encode() + b";")
    else:
        sha.update(f"{type(obj).__name__}={obj!r};".encode())


def _tensor_sums(tensor: torch.Tensor) -> bytes:
    """Return a fingerprint of the bytes: sha256 when small, position-weighted block sums when large."""
    data = tensor.detach()
    if data.device.type == "meta":
        return b"meta"
    if data.is_quantized:
        data = data.int_repr()
    if data.layout != torch.strided:
        data = data.to_dense()
    data = data.resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
    if data.numel() <= _SMALL_BYTES:  # a few torch calls would cost more than hashing the bytes
        return hashlib.sha256(data.cpu().numpy().tobytes()).digest()
    whole = data.numel() // 8 * 8
    try:
        words = data[:whole].view(torch.int64)
    except RuntimeError:  # storage offset not a multiple of 8 bytes
        words = data[:whole].clone().view(torch.int64)
    blocks = words.numel() // _BLOCK_WORDS
    sums = words[: blocks * _BLOCK_WORDS].view(blocks, _BLOCK_WORDS).sum(1)
    weights = torch.arange(1, blocks + 1, dtype=torch.int64, device=sums.device)
    rest = words[blocks * _BLOCK_WORDS :].cpu().numpy().tobytes() + bytes(data[whole:].cpu().tolist())
    plain, weighted = int(sums.sum()) % 2**64, int((sums * weights).sum()) % 2**64
    return plain.to_bytes(8, "little") + weighted.to_bytes(8, "little") + hashlib.sha256(rest).digest()
