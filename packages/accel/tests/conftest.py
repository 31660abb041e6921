"""Every test starts and ends with fresh shared state and no launcher variables in the environment."""

import pytest

from accel_state import AcceleratorState, GradientState, PartialState

_LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE", "ACCEL_USE_CPU", "ACCEL_MIXED_PRECISION", "ACCEL_DEBUG_MODE",
    "ACCEL_GRADIENT_ACCUMULATION_STEPS", "ACCEL_TIMEOUT",
)  # fmt: skip


def _reset() -> None:
    AcceleratorState._reset_state()
    PartialState._reset_state()
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    _reset()
    yield
    _reset()
