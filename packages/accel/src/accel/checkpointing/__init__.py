"""Checkpoints: `save_state`/`load_state` and the folder, files and checks behind them.

Names load on first use (PEP 562): the facade imports `checkpointing.registry` when it is built,
and the writing and reading code loads at the first `save_state` or `load_state`.
"""

from typing import TYPE_CHECKING, Any

from accel_state.lazy_exports import lazy_attribute, lazy_dir

if TYPE_CHECKING:
    from accel.checkpointing.errors import CheckpointError, CheckpointTargetError, CheckpointWriteError
    from accel.checkpointing.fit import LAYOUT_KEY
    from accel.checkpointing.layout import TRAINING_STATE_NAME
    from accel.checkpointing.naming import list_checkpoints
    from accel.checkpointing.registry import CheckpointRegistry
    from accel.checkpointing.save_load import load_state, save_state

# Public name -> the module that defines it.
_LAZY = {
    "CheckpointError": "accel.checkpointing.errors",
    "CheckpointRegistry": "accel.checkpointing.registry",
    "CheckpointTargetError": "accel.checkpointing.errors",
    "CheckpointWriteError": "accel.checkpointing.errors",
    "LAYOUT_KEY": "accel.checkpointing.fit",
    "TRAINING_STATE_NAME": "accel.checkpointing.layout",
    "list_checkpoints": "accel.checkpointing.naming",
    "load_state": "accel.checkpointing.save_load",
    "save_state": "accel.checkpointing.save_load",
}

__all__ = [
    "CheckpointError",
    "CheckpointRegistry",
    "CheckpointTargetError",
    "CheckpointWriteError",
    "LAYOUT_KEY",
    "TRAINING_STATE_NAME",
    "list_checkpoints",
    "load_state",
    "save_state",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(__name__, _LAZY)
