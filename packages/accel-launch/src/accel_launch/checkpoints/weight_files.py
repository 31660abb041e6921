"""Merged weights as files, with Hugging Face's names, as the umbrella's `save_model` writes them.

One file (`model.safetensors`, or `pytorch_model.bin` unsafe) or, above the shard size, shards
`model-00001-of-0000N.safetensors` ... plus `model.safetensors.index.json` mapping each weight to its
file. accel-launch sits below the umbrella and cannot call `save_model`, so the layout is written
here to the same names and index format. Each file is written under a hidden partial name, read
back and compared tensor by tensor before anything is renamed into place.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_launch.checkpoints.errors import MergeError
from accel_launch.checkpoints.progress import NO_PROGRESS, Progress

_SIZE_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
DEFAULT_MAX_SHARD_SIZE = "10GB"


def parse_size(size: int | str) -> int:
    """Return `size` in bytes: a positive int, or a string such as "10GB", "500MB" or "2GiB"."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    text = str(size).strip().upper()
    if text.isdigit() and int(text) > 0:
        return int(text)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]I?B)", text)
    if not match or float(match.group(1)) <= 0:
        raise MergeError(
            f"--max_shard_size must be a positive size such as 10GB, 500MB or 2GiB, got {size!r}"
        )
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def stem_and_suffix(safe: bool) -> tuple[str, str]:
    """Return the file stem and suffix Hugging Face uses for safetensors (`safe`) or torch weights."""
    return ("model", ".safetensors") if safe else ("pytorch_model", ".bin")


@dataclass
class WeightFiles:
    """The files one merge writes into a folder: name -> tensors, and the index when sharded."""

    folder: Path
    safe: bool
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    index_name: str | None = None

    @property
    def names(self) -> list[str]:
        """The files written, the index last."""
        return [*self.shards, *([self.index_name] if self.index_name else [])]


def plan_files(folder: Path, state: dict[str, Any], safe: bool, max_shard_size: int) -> WeightFiles:
    """Return how `state` is split into files of at most `max_shard_size` bytes (a bigger tensor alone)."""
    groups: list[dict[str, Any]] = [{}]
    filled = 0
    for name, value in state.items():
        size = nbytes(value)
        if groups[-1] and filled + size > max_shard_size:
            groups.append({})
            filled = 0
        groups[-1][name] = value
        filled += size
    stem, suffix = stem_and_suffix(safe)
    if len(groups) == 1:
        return WeightFiles(folder, safe, {stem + suffix: groups[0]})
    count = len(groups)
    names = [f"{stem}-{i:05d}-of-{count:05d}{suffix}" for i in range(1, count + 1)]
    return WeightFiles(folder, safe, dict(zip(names, groups, strict=True)), f"{stem}{suffix}.index.json")


def nbytes(value: Any) -> int:
    """Return the bytes a tensor's data takes (0 for a non-tensor entry)."""
    import torch

    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def existing_outputs(folder: Path, safe: bool) -> list[Path]:
    """Return the files of an earlier merge (or save_model) of this format in `folder`: the one-file
    name, the index and the shards of its `<stem>-0000i-of-0000n` pattern."""
    if not folder.is_dir():
        return []
    stem, suffix = stem_and_suffix(safe)
    pattern = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}" + re.escape(suffix))
    names = {stem + suffix, f"{stem}{suffix}.index.json"}
    return sorted(p for p in folder.iterdir() if p.name in names or pattern.fullmatch(p.name))


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial-{uuid.uuid4().hex[:12]}")


def write_partials(files: WeightFiles, progress: Progress = NO_PROGRESS) -> dict[str, Path]:
    """Write every file under a hidden partial name in its folder; return name -> partial path.

    On any failure the partials written so far are removed and MergeError names the file.
    """
    partials: dict[str, Path] = {}
    current = files.folder
    try:
        for name, tensors in files.shards.items():
            current = files.folder / name
            partials[name] = _partial(current)
            _write(partials[name], tensors, files.safe)
            os.chmod(partials[name], _file_mode())
            progress.advance(sum(nbytes(value) for value in tensors.values()))
        if files.index_name:
            current = files.folder / files.index_name
            partials[files.index_name] = _partial(current)
            partials[files.index_name].write_text(_index_text(files), encoding="utf-8")
    except Exception as error:
        remove(partials.values())
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise MergeError(
            f"{current}: cannot write ({reason.strip().splitlines()[-1] if reason else error!r})"
        ) from None
    except BaseException:
        remove(partials.values())
        raise
    return partials


def _file_mode() -> int:
    """Return the mode a new file gets under this process's umask (safetensors creates its files 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _write(path: Path, tensors: dict[str, Any], safe: bool) -> None:
    import torch

    if not safe:
        torch.save(tensors, path)
        return
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})


def _index_text(files: WeightFiles) -> str:
    weight_map = {key: name for name, tensors in files.shards.items() for key in tensors}
    total = sum(nbytes(value) for tensors in files.shards.values() for value in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return json.dumps(index, indent=2) + "\n"


def verify_partials(files: WeightFiles, partials: dict[str, Path], progress: Progress = NO_PROGRESS) -> int:
    """Read every written file back and compare it with what was meant: the same names, and each
    tensor of the same dtype, shape and bytes (so NaNs compare equal). Return the tensors compared."""
    compared = 0
    for name, expected in files.shards.items():
        shown = files.folder / name
        try:
            found = _read(partials[name], files.safe)
        except Exception as error:
            raise MergeError(
                f"{shown}: written but not readable back ({type(error).__name__}: {error})"
            ) from None
        if set(found) != set(expected):
            missing = sorted(set(expected) - set(found)) or sorted(set(found) - set(expected))
            raise MergeError(f"{shown}: read back with different weights (e.g. {missing[0]!r})")
        for key, value in expected.items():
            if not same_value(value, found[key]):
                raise MergeError(f"{shown}: weight {key!r} read back differs from the checkpoint's")
            compared += 1
        progress.advance(sum(nbytes(value) for value in expected.values()))
    if files.index_name:
        written = json.loads(partials[files.index_name].read_text(encoding="utf-8"))
        if written != json.loads(_index_text(files)):
            raise MergeError(f"{files.folder / files.index_name}: read back differs from what was written")
    return compared


def _read(path: Path, safe: bool) -> dict[str, Any]:
    import torch

    if safe:
        from safetensors.torch import load_file

        return load_file(str(path))
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(loaded, dict):
        raise TypeError(f"holds {type(loaded).__name__}, not a state dict")
    return loaded


def same_value(expected: Any, found: Any) -> bool:
    """Return whether two state dict values are identical: tensors bit for bit, others by ==."""
    import torch

    if not isinstance(expected, torch.Tensor) or not isinstance(found, torch.Tensor):
        return type(expected) is type(found) and bool(expected == found)
    if expected.dtype != found.dtype or expected.shape != found.shape:
        return False
    return torch.equal(_bytes(expected), _bytes(found))


def _bytes(tensor: Any) -> Any:
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def move_into_place(files: WeightFiles, partials: dict[str, Path]) -> list[Path]:
    """Rename every partial onto its name (the index last); return the paths written."""
    written = []
    for name in files.names:
        os.replace(partials[name], files.folder / name)
        written.append(files.folder / name)
    return written


def remove(paths: Iterable[Path]) -> None:
    """Remove the files `paths` that exist (partials of a failed write, stale files of an earlier one)."""
    for path in paths:
        path.unlink(missing_ok=True)
