"""Finding a checkpoint's shard files and reading one shard at a time without copying it into memory."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.safetensors_io import MappedSafetensors

WEIGHTS_NAMES = ("model.safetensors", "pytorch_model.bin")
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _files_of_index(index_file: Path) -> list[Path]:
    try:
        weight_map = json.loads(index_file.read_text())["weight_map"]
        names = list(dict.fromkeys(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise BigModelingError(
            f"checkpoint index {index_file} is not a valid index (weight_map): {error}"
        ) from None
    files = [index_file.parent / name for name in names]
    for file in files:
        if not file.is_file():
            raise BigModelingError(
                f"checkpoint index {index_file} lists shard {file.name}, which does not exist"
            )
    return files


def checkpoint_files(checkpoint: str | os.PathLike[str]) -> list[Path]:
    """Return the shard files of `checkpoint`: a weights file, a folder holding one, or an index."""
    path = Path(checkpoint)
    if path.is_file():
        return _files_of_index(path) if path.name.endswith(".json") else [path]
    if not path.is_dir():
        raise BigModelingError(f"checkpoint {path} is neither a file nor a folder")
    for name in WEIGHTS_NAMES:
        if (path / name).is_file():
            return [path / name]
    indexes = [path / name for name in INDEX_NAMES if (path / name).is_file()]
    if not indexes:
        indexes = sorted(path.glob("*.index.json"))
    if len(indexes) == 1:
        return _files_of_index(indexes[0])
    if indexes:
        raise BigModelingError(
            f"checkpoint folder {path} holds several indexes: {', '.join(p.name for p in indexes)}"
        )
    singles = sorted(path.glob("*.safetensors")) or sorted([*path.glob("*.bin"), *path.glob("*.pt")])
    if len(singles) == 1:
        return singles
    raise BigModelingError(
        f"checkpoint folder {path} holds no weights file or index (model.safetensors, ...)"
    )


def _load_pickled(file: Path) -> dict[str, torch.Tensor]:
    try:
        try:
            # A memory map keeps the shard in the page cache; old (non-zip) files cannot be mapped.
            loaded = torch.load(file, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(file))
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
            loaded = torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BigModelingError(f"corrupt checkpoint shard {file}: {first}") from None
    if isinstance(loaded, dict) and "state_dict" in loaded and isinstance(loaded["state_dict"], dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise BigModelingError(f"checkpoint shard {file} does not hold a dict of tensors")
    return loaded


class ShardReader:
    """One shard's tensors by name, read lazily from a memory map (safetensors) or a mapped torch file."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._mapped: MappedSafetensors | None = None
        self._loaded: dict[str, torch.Tensor] | None = None
        if file.suffix == ".safetensors":
            self._mapped = MappedSafetensors(file)
        else:
            self._loaded = _load_pickled(file)

    def shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Return shape and dtype per tensor, from the header alone for safetensors."""
        if self._mapped is not None:
            return {name: (info.shape, info.dtype) for name, info in self._mapped.infos.items()}
        assert self._loaded is not None
        return {name: (tuple(t.shape), t.dtype) for name, t in self._loaded.items()}

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (name, tensor); the tensors share the file's pages until someone copies them."""
        if self._mapped is not None:
            for name in self._mapped.keys():
                yield name, self._mapped.get(name)
        else:
            assert self._loaded is not None
            yield from self._loaded.items()


def load_state_dict(checkpoint_file: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Return the tensors of one shard file, memory-mapped where the format allows."""
    return dict(ShardReader(Path(checkpoint_file)).items())
