"""Seeds and snapshots every random number generator a training loop draws from."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from accel_state.environment import env_vars
from accel_state.environment.distributed_type import DistributedType, resolve_distributed_type
from accel_state.seam.backend import BackendNotAvailableError, seed_backend_generators
from accel_state.shared_state.partial_state import PartialState


def set_seed(seed: int, device_specific: bool = False) -> None:
    """Seed python, numpy, torch (all devices) and the backend's own device generator (if any);
    with `device_specific`, add the rank to the seed."""
    if device_specific:
        seed += PartialState().process_index
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        seed_backend_generators(_run_type(), seed)
    except BackendNotAvailableError:
        pass  # no backend to run on, so none of its generators to seed (Accelerator() will say so)


def _run_type() -> DistributedType:
    """The distributed type of this process's state, or the one it will be set up with; without
    building the state (seeding before `Accelerator()` must not start a runtime)."""
    current = PartialState.current()
    if current is not None:
        return DistributedType(current.distributed_type)
    return resolve_distributed_type(cpu=bool(env_vars.read_flag(env_vars.USE_CPU)))


def get_rng_states() -> dict[str, Any]:
    """Return the states of python's, numpy's, torch's and (when present) CUDA's generators."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore generator states taken by `get_rng_states`."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
