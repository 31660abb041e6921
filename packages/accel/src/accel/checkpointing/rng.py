"""Random states as plain data: a safetensors file of the generators' words, the few scalars as
its JSON metadata, so that loading them unpickles nothing (torch's weights-only unpickler took
0.5 ms of every load for these 17 KB). Older checkpoints' `random_states_<rank>.pt` (a
weights-only torch file) still load.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from accel_state import get_rng_states, set_rng_states


def rng_file_name(rank: int) -> str:
    return f"random_states_{rank}.safetensors"


def older_rng_file_name(rank: int) -> str:
    """The name of a rank's random states in older checkpoints (a weights-only torch file)."""
    return f"random_states_{rank}.pt"


def portable_rng_states(loaders: list[Any]) -> dict[str, Any]:
    """Return this process's random states (and each loader's generator state) as plain data."""
    states = get_rng_states()
    version, internal, gauss = states["python"]
    name, keys, position, has_gauss, cached = states["numpy"]
    portable: dict[str, Any] = {  # long integer lists as tensors: they load far faster
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [
            str(name),
            torch.from_numpy(keys.astype(np.int64)),
            int(position),
            int(has_gauss),
            float(cached),
        ],
        "torch": states["torch"],
        "generators": [
            gen.get_state() if (gen := getattr(loader, "synchronized_generator", None)) is not None else None
            for loader in loaders
        ],
    }
    if "cuda" in states:
        portable["cuda"] = list(states["cuda"])
    return portable


def rng_file(portable: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Return (tensors, metadata) of the safetensors file holding `portable`."""
    version, internal, gauss = portable["python"]
    name, keys, position, has_gauss, cached = portable["numpy"]
    tensors = {"python": internal, "numpy": keys, "torch": portable["torch"]}
    generators = []
    for i, state in enumerate(portable["generators"]):
        generators.append(state is not None)
        if state is not None:
            tensors[f"generator.{i}"] = state
    cuda = portable.get("cuda")
    for i, state in enumerate(cuda or []):
        tensors[f"cuda.{i}"] = state
    scalars = {
        "python": [version, gauss],
        "numpy": [name, position, has_gauss, cached],
        "generators": generators,
        "cuda": None if cuda is None else len(cuda),
    }
    return {key: tensor.contiguous() for key, tensor in tensors.items()}, {
        "random_states": json.dumps(scalars)
    }


def _from_file(loaded: tuple[dict[str, torch.Tensor], dict[str, str]]) -> dict[str, Any]:
    tensors, metadata = loaded
    scalars = json.loads(metadata["random_states"])
    version, gauss = scalars["python"]
    name, position, has_gauss, cached = scalars["numpy"]
    portable: dict[str, Any] = {
        "python": [version, tensors["python"], gauss],
        "numpy": [name, tensors["numpy"], position, has_gauss, cached],
        "torch": tensors["torch"],
        "generators": [
            tensors[f"generator.{i}"] if kept else None for i, kept in enumerate(scalars["generators"])
        ],
    }
    if scalars["cuda"] is not None:
        portable["cuda"] = [tensors[f"cuda.{i}"] for i in range(int(scalars["cuda"]))]
    return portable


def _integers(values: torch.Tensor | list[int]) -> list[int]:
    """Return a list of ints from a tensor (this format) or a list (checkpoints from accel 0.1)."""
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def rng_states(loaded: Any) -> tuple[dict[str, Any], list[Any]]:
    """Return (the states for set_rng_states, each loader's generator state) from a random states
    file: the (tensors, metadata) of this format, or the plain data of an older torch file."""
    portable = _from_file(loaded) if isinstance(loaded, tuple) else loaded
    version, internal, gauss = portable["python"]
    name, keys, position, has_gauss, cached = portable["numpy"]
    states: dict[str, Any] = {
        "python": (version, tuple(_integers(internal)), gauss),
        "numpy": (name, np.asarray(_integers(keys), dtype=np.uint32), position, has_gauss, cached),
        "torch": portable["torch"],
    }
    if "cuda" in portable:
        states["cuda"] = portable["cuda"]
    return states, list(portable.get("generators", []))


def restore_rng_states(loaders: list[Any], decoded: tuple[dict[str, Any], list[Any]]) -> None:
    states, generator_states = decoded
    set_rng_states(states)
    for loader, state in zip(loaders, generator_states, strict=False):
        generator = getattr(loader, "synchronized_generator", None)
        if generator is not None and state is not None:
            generator.set_state(state)
