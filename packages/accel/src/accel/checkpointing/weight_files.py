"""Model weights as files: tied weights made safetensors-safe, and `save_model`'s sharded HF layout."""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.writer import write_bytes_file, write_safetensors_file, write_torch_file
from accel_state import PartialState


def flat_tensors(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Return (tensors safetensors can store, {alias: name}) for a state dict with tied weights.

    A tensor identical to an earlier one (same storage, offset, shape, stride) is stored once and
    recorded as an alias; other tensors that share memory are copied, which safetensors requires.
    """
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: collections.Counter[int] = collections.Counter()
    for name, tensor in state.items():
        tensor = tensor.detach()
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
               tuple(tensor.shape), tensor.stride(), tensor.dtype)  # fmt: skip
        if tensor.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = tensor
        if tensor.numel():
            storages[tensor.untyped_storage().data_ptr()] += 1
    for name, tensor in tensors.items():
        if not tensor.is_contiguous() or (
            tensor.numel() and storages[tensor.untyped_storage().data_ptr()] > 1
        ):
            tensors[name] = tensor.contiguous() if not tensor.is_contiguous() else tensor.clone()
    return tensors, aliases


def with_aliases(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict[str, torch.Tensor]:
    """Return `tensors` plus the aliases recorded by `flat_tensors` in a safetensors file's metadata."""
    aliases = json.loads(metadata.get("accel_aliases", "{}"))
    return {**tensors, **{alias: tensors[name] for alias, name in aliases.items()}}


# save_model: sharded weights with Hugging Face's file names -----------------------------------------
_SIZE_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(size: int | str) -> int:
    """Return `size` in bytes: an int, or a string such as "10GB", "500MB" or "2GiB"."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = isinstance(size, str) and re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B)\s*", size.upper())
    if not match:
        raise ValueError(
            f"max_shard_size must be a positive number of bytes or like '10GB'/'500MB'/'2GiB', got {size!r}"
        )
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def _shards(tensors: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    filled = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        if shards[-1] and filled + size > limit:
            shards.append({})
            filled = 0
        shards[-1][name] = tensor
        filled += size
    return shards


def save_model(
    accelerator: Any,
    model: torch.nn.Module,
    save_directory: str | Path,
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> None:
    """Write `model`'s weights into `save_directory` (main process), in shards of `max_shard_size` at most.

    One shard: `model.safetensors` (`pytorch_model.bin` without safe serialization). Several:
    `model-00001-of-0000N.safetensors` ... plus `model.safetensors.index.json` mapping each weight to
    its file. Each file is renamed into place whole. Of an earlier save, only what save_model can
    tell it wrote is removed: the shards its index lists, the index, the one-file name; other files
    in the folder are left alone.
    """
    state = accelerator.get_state_dict(model)  # on every rank: sharded backends gather collectively
    if not PartialState().is_main_process:
        return
    folder = Path(save_directory)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"save_model: {folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    stem, ext = ("model", ".safetensors") if safe_serialization else ("pytorch_model", ".bin")
    tensors, aliases = flat_tensors(state) if safe_serialization else (dict(state), {})
    shards = _shards(tensors, parse_size(max_shard_size))
    names = (
        [stem + ext]
        if len(shards) == 1
        else [f"{stem}-{i:05d}-of-{len(shards):05d}{ext}" for i in range(1, len(shards) + 1)]
    )
    index_path = folder / f"{stem}{ext}.index.json"
    for stale in {stem + ext, *_indexed_shards(index_path, stem, ext)} - set(names):
        (folder / stale).unlink(missing_ok=True)
    index_path.unlink(missing_ok=True)
    for name, shard in zip(names, shards, strict=True):
        _replace_file(folder / name, functools.partial(_write_shard, shard, aliases, safe_serialization))
    if len(shards) > 1:
        weight_map = {key: name for name, shard in zip(names, shards, strict=True) for key in shard}
        weight_map.update({alias: weight_map[target] for alias, target in aliases.items()})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        text = json.dumps(index, indent=2) + "\n"
        _replace_file(index_path, functools.partial(_write_text, text))


def _indexed_shards(index_path: Path, stem: str, ext: str) -> set[str]:
    """Return the shard names (`<stem>-0000i-of-0000n<ext>`) that an earlier save's index lists."""
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
        listed = set(weight_map.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()
    pattern = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}" + re.escape(ext))
    return {name for name in listed if isinstance(name, str) and pattern.fullmatch(name)}


def _write_text(text: str, path: Path) -> None:
    write_bytes_file(path, text.encode())


def _write_shard(tensors: dict[str, torch.Tensor], aliases: dict[str, str], safe: bool, path: Path) -> None:
    if safe:
        kept = {alias: name for alias, name in aliases.items() if name in tensors}
        write_safetensors_file(path, tensors, {"format": "pt", "accel_aliases": json.dumps(kept)})
    else:
        write_torch_file(path, tensors)


def _replace_file(path: Path, write: Callable[[Path], None]) -> None:
    """Write `path` through a uniquely named partial file renamed into place (removed on failure)."""
    partial = path.with_name(f".{path.name}.partial-{uuid.uuid4().hex[:12]}")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
