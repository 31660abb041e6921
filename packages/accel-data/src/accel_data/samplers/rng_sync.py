"""Copies the main process's random generator states to every rank.

Used at the start of each pass over a loader when `rng_types` asks for it, so that randomness
drawn inside the data pipeline (augmentations, a sampler's own generator) agrees across ranks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch

from accel_state import PartialState, broadcast_object_list

RNG_TYPES = ("torch", "cuda", "generator", "python", "numpy")


def validate_rng_types(rng_types: Sequence[str] | None) -> list[str]:
    """Return `rng_types` as a list, rejecting unknown names."""
    chosen = list(rng_types or [])
    unknown = [name for name in chosen if name not in RNG_TYPES]
    if unknown:
        raise ValueError(f"rng_types: unknown generator(s) {unknown}; choose from {list(RNG_TYPES)}")
    return chosen


def synchronize_rng_states(rng_types: Sequence[str], generator: torch.Generator | None = None) -> None:
    """Set each named generator on every rank to the main process's state."""
    state = PartialState()
    if not state.use_distributed or not rng_types:
        return
    snapshot: dict[str, object] = {}
    if state.is_main_process:
        for name in rng_types:
            if name == "torch":
                snapshot[name] = torch.get_rng_state()
            elif name == "cuda" and torch.cuda.is_available():
                snapshot[name] = torch.cuda.get_rng_state()
            elif name == "generator" and generator is not None:
                snapshot[name] = generator.get_state()
            elif name == "python":
                snapshot[name] = random.getstate()
            elif name == "numpy":
                snapshot[name] = np.random.get_state()
    received = broadcast_object_list([snapshot])[0]
    for name, value in received.items():
        if name == "torch":
            torch.set_rng_state(value)
        elif name == "cuda":
            torch.cuda.set_rng_state(value)
        elif name == "generator" and generator is not None:
            generator.set_state(value)
        elif name == "python":
            random.setstate(value)
        elif name == "numpy":
            np.random.set_state(value)
