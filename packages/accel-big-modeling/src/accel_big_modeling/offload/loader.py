"""Reading offloaded weights back: a mapping name -> tensor over a state dict and an offload folder.

Tensors of the folder are memory-mapped views: a CPU forward uses them in place, so an offloaded
module costs page cache (reclaimable, shared) and not anonymous memory of the process.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.offload.storage import read_offload_index
from accel_big_modeling.safetensors_io import MappedSafetensors


def _dtype(name: str) -> torch.dtype:
    found = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(found, torch.dtype):
        raise BigModelingError(f"offload index names unknown dtype {name!r}")
    return found


class OffloadedWeightsLoader(Mapping[str, torch.Tensor]):
    """Weights by name from an in-memory `state_dict` first, then from the offload folder `save_folder`.

    `index` overrides the folder's index.json; `device` moves each weight read from disk there.
    """

    def __init__(
        self,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        save_folder: str | os.PathLike[str] | None = None,
        index: Mapping[str, dict[str, Any]] | None = None,
        device: int | str | torch.device | None = None,
    ) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise BigModelingError("OffloadedWeightsLoader needs a state_dict, a save_folder or an index")
        self.state_dict: Mapping[str, torch.Tensor] = state_dict or {}
        self.save_folder = Path(save_folder) if save_folder is not None else None
        if index is None and self.save_folder is not None:
            index = read_offload_index(self.save_folder)
        self.index: dict[str, dict[str, Any]] = dict(index or {})
        self.all_keys = list(self.state_dict) + [key for key in self.index if key not in self.state_dict]
        self.device = device
        self._files: dict[Path, MappedSafetensors] = {}

    def _safetensors(self, entry: dict[str, Any]) -> MappedSafetensors:
        path = Path(entry["safetensors_file"])
        if not path.is_file() and self.save_folder is not None:
            path = self.save_folder / path.name  # the folder was moved since it was written
        if path not in self._files:
            self._files[path] = MappedSafetensors(path)
        return self._files[path]

    def _dat_file(self, key: str, entry: dict[str, Any]) -> torch.Tensor:
        # Accelerate's raw format: one `<name>.dat` per weight, bfloat16 stored as int16.
        if self.save_folder is None:
            raise BigModelingError(f"offloaded weight {key!r} needs the offload folder, none was given")
        path = self.save_folder / f"{key}.dat"
        shape = tuple(entry["shape"])
        dtype = _dtype(entry["dtype"])
        stored = torch.int16 if dtype == torch.bfloat16 else dtype
        if path.stat().st_size == 0:
            return torch.empty(shape, dtype=dtype)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        return torch.frombuffer(mapped, dtype=stored).view(dtype).reshape(shape)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        entry = self.index[key]
        if "safetensors_file" in entry:
            tensor = self._safetensors(entry).get(entry.get("weight_name", key))
        else:
            tensor = self._dat_file(key, entry)
        return tensor.to(self.device) if self.device is not None else tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)

    def __contains__(self, key: object) -> bool:
        return key in self.state_dict or key in self.index


class PrefixedDataset(Mapping[str, torch.Tensor]):
    """The entries of `dataset` under `prefix`, named without it (one module's view of the weights)."""

    def __init__(self, dataset: Mapping[str, torch.Tensor], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.dataset[f"{self.prefix}{key}"]

    def __iter__(self) -> Iterator[str]:
        return iter([key[len(self.prefix) :] for key in self.dataset if key.startswith(self.prefix)])

    def __len__(self) -> int:
        return len([key for key in self.dataset if key.startswith(self.prefix)])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and f"{self.prefix}{key}" in self.dataset


class TiedWeightsMap(Mapping[str, torch.Tensor]):
    """`weights` where a tied name missing from it reads its partner's tensor."""

    def __init__(self, weights: Mapping[str, torch.Tensor], tied_groups: list[list[str]]) -> None:
        self.weights = weights
        self.aliases: dict[str, str] = {}
        for group in tied_groups:
            present = [name for name in group if name in weights]
            if present:
                self.aliases.update({name: present[0] for name in group if name not in weights})

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.weights[self.aliases.get(key, key)]

    def __iter__(self) -> Iterator[str]:
        yield from self.weights
        yield from self.aliases

    def __len__(self) -> int:
        return len(self.weights) + len(self.aliases)

    def __contains__(self, key: object) -> bool:
        return key in self.aliases or key in self.weights
