"""Test support shared by every package: a clean single-process world for unit tests.

(Multi-process tests use `accel_launch.testing.ranks`, which launches real ranks.) Our own suites get
`single_process_environment` around every test from `accel_state.testing.pytest_plugin`.
This module imports no torch, so that loading the plugin costs a suite that never uses torch nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from accel_state.environment import env_vars

# Variables through which a launcher or the user would change what the state detects.
LAUNCH_VARIABLES = (
    env_vars.RANK, env_vars.WORLD_SIZE, env_vars.LOCAL_RANK, env_vars.LOCAL_WORLD_SIZE,
    env_vars.MASTER_ADDR, env_vars.MASTER_PORT,
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE",
    env_vars.USE_CPU, env_vars.MIXED_PRECISION, env_vars.DEBUG_MODE,
    env_vars.GRADIENT_ACCUMULATION_STEPS, env_vars.TIMEOUT, env_vars.DISTRIBUTED_TYPE,
    env_vars.CHECK_COLLECTIVES,
)  # fmt: skip

# The shared singletons, in the order they are forgotten: (module, class).
_SHARED_STATES = (
    ("accel_state.shared_state.accelerator_state", "AcceleratorState"),
    ("accel_state.shared_state.partial_state", "PartialState"),
    ("accel_state.shared_state.gradient_state", "GradientState"),
)


def reset_shared_state() -> None:
    """Forget every shared singleton (the process group, if any, stays up)."""
    for module_name, class_name in _SHARED_STATES:
        # A state whose module was never imported holds nothing; importing it would import torch.
        module = sys.modules.get(module_name)
        if module is not None:
            getattr(module, class_name)._reset_state()


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
