"""Random states as plain data, so that a random states file loads with weights_only=True."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from accel_state import get_rng_states, set_rng_states


def portable_rng_states(loaders: list[Any]) -> dict[str, Any]:
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


def _integers(values: torch.Tensor | list[int]) -> list[int]:
    """Return a list of ints from a tensor (this format) or a list (checkpoints from accel 0.1)."""
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def rng_states(portable: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """Return (the states for set_rng_states, each loader's generator state) from a random states file."""
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
