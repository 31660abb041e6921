"""The offload folder: safetensors shards plus an `index.json`, written without touching anyone else's files.

The index follows Accelerate's format (name -> dtype, shape, and for safetensors-backed entries
`safetensors_file` and `weight_name`), so Accelerate's loader can read our folders and ours theirs.
A manifest lists the files we wrote: only those may be replaced or pruned; a folder holding an
`index.json` we did not write is refused, other foreign files are left alone beside ours.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.safetensors_io import write_safetensors

INDEX_NAME = "index.json"
MANIFEST_NAME = ".accel_offload_manifest.json"
SHARD_PATTERN = "accel-offload-{:05d}.safetensors"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise BigModelingError(f"offload folder {path.parent}: cannot read {path.name}: {error}") from None


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1))
    os.replace(temporary, path)


def is_offload_index(index: Any) -> bool:
    """Return True when `index` looks like an offload index (name -> dict with dtype and shape)."""
    return isinstance(index, dict) and all(
        isinstance(entry, dict) and "dtype" in entry and "shape" in entry for entry in index.values()
    )


def read_offload_index(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """Return the offload index of `folder`, None if absent; raise if it is something else."""
    path = Path(folder) / INDEX_NAME
    if not path.is_file():
        return None
    index = _read_json(path)
    if not is_offload_index(index):
        raise BigModelingError(
            f"offload folder {path.parent} holds an index.json that is not an offload index"
        )
    return index


class OffloadWriter:
    """Writes weights into an offload folder shard by shard, then one merged index."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise BigModelingError(f"offload folder {self.folder} is a file, not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest_path = self.folder / MANIFEST_NAME
        self.ours: set[str] = set(_read_json(manifest_path)) if manifest_path.is_file() else set()
        index_path = self.folder / INDEX_NAME
        self.index: dict[str, dict[str, Any]] = {}
        if index_path.is_file():
            if INDEX_NAME not in self.ours:
                raise BigModelingError(
                    f"offload folder {self.folder} holds an index.json that accel did not write: "
                    "pass an empty or new folder"
                )
            self.index = read_offload_index(self.folder) or {}
        self._next = 1

    def _free_shard_name(self) -> str:
        while True:
            name = SHARD_PATTERN.format(self._next)
            self._next += 1
            if name in self.ours and not any(
                Path(entry.get("safetensors_file", "")).name == name for entry in self.index.values()
            ):
                return name  # ours and unused: safe to replace
            if not (self.folder / name).exists():
                return name

    def write(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Write `tensors` as one new shard and record them in the index (written by `finish`)."""
        if not tensors:
            return
        name = self._free_shard_name()
        self.ours.add(name)
        self._save_manifest()
        write_safetensors(self.folder / name, tensors)
        absolute = str((self.folder / name).resolve())
        for key, tensor in tensors.items():
            dtype = str(tensor.dtype).replace("torch.", "")
            self.index[key] = {
                "dtype": dtype,
                "shape": list(tensor.shape),
                "safetensors_file": absolute,
                "weight_name": key,
            }

    def finish(self) -> dict[str, dict[str, Any]]:
        """Write the index and remove our own shards that it no longer references; return the index."""
        self.ours.add(INDEX_NAME)
        self._save_manifest()
        _write_json(self.folder / INDEX_NAME, self.index)
        used = {Path(entry.get("safetensors_file", "")).name for entry in self.index.values()}
        for name in sorted(self.ours):
            if name.startswith("accel-offload-") and name not in used:
                (self.folder / name).unlink(missing_ok=True)
                self.ours.discard(name)
        self._save_manifest()
        return self.index

    def _save_manifest(self) -> None:
        _write_json(self.folder / MANIFEST_NAME, sorted(self.ours))


def offload_state_dict(save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write `state_dict` into the offload folder `save_dir` (one safetensors shard and the index)."""
    writer = OffloadWriter(save_dir)
    writer.write(state_dict)
    writer.finish()
