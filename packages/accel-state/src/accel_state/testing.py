"""Test support shared by every package: a clean single-process world for unit tests.

(Multi-process tests use `accel_launch.testing`, which launches real ranks.)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from accel_state import env_vars
from accel_state.accelerator_state import AcceleratorState
from accel_state.gradient_state import GradientState
from accel_state.partial_state import PartialState

# Variables through which a launcher or the user would change what the state detects.
LAUNCH_VARIABLES = (
    env_vars.RANK, env_vars.WORLD_SIZE, env_vars.LOCAL_RANK, env_vars.LOCAL_WORLD_SIZE,
    env_vars.MASTER_ADDR, env_vars.MASTER_PORT,
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE",
    env_vars.USE_CPU, env_vars.MIXED_PRECISION, env_vars.DEBUG_MODE,
    env_vars.GRADIENT_ACCUMULATION_STEPS, env_vars.TIMEOUT,
)  # fmt: skip


def reset_shared_state() -> None:
    """Forget every shared singleton (the process group, if any, stays up)."""
    AcceleratorState._reset_state()
    PartialState._reset_state()
    GradientState._reset_state()


@contextlib.contextmanager
def single_process_environment() -> Iterator[None]:
    """Run the block as a plain one-process `python` run with fresh shared state, then restore."""
    saved = {name: os.environ.pop(name) for name in LAUNCH_VARIABLES if name in os.environ}
    reset_shared_state()
    try:
        yield
    finally:
        reset_shared_state()
        for name in LAUNCH_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update(saved)
