"""Where save_state writes and load_state reads: `checkpoint_<n>` folders, and how many are kept.

With `ProjectConfiguration(automatic_checkpoint_naming=True)` a save goes into the next
`checkpoint_<n>` under the project folder, a load reads the newest, and saves beyond
`total_limit` delete the oldest.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from accel.checkpoint_errors import CheckpointError
from accel.checkpoint_target import remove_checkpoint
from accel.project_config import ProjectConfiguration

CHECKPOINT_FOLDER = re.compile(r"checkpoint_(\d+)")


def project_configuration(accelerator: Any) -> ProjectConfiguration | None:
    return getattr(accelerator, "project_configuration", None)


def list_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """Return the `checkpoint_<n>` folders under `checkpoints_dir`, oldest (smallest n) first."""
    folder = Path(checkpoints_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := CHECKPOINT_FOLDER.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def save_dir(accelerator: Any, output_dir: str | Path | None) -> Path:
    config = project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        if output_dir is not None:
            config.set_directories(output_dir)
        folder = config.checkpoints_dir / f"checkpoint_{config.iteration}"
        if folder.exists():
            raise ValueError(
                f"save_state: checkpoint folder {folder} already exists; load_state() the newest "
                "checkpoint first (which sets project_configuration.iteration) or set iteration yourself"
            )
        return folder
    if output_dir is None:
        raise ValueError(
            "save_state: pass output_dir, or use ProjectConfiguration(automatic_checkpoint_naming=True)"
        )
    return Path(output_dir)


def load_dir(accelerator: Any, input_dir: str | Path | None) -> Path:
    if input_dir is not None:
        return Path(input_dir)
    config = project_configuration(accelerator)
    if config is None or not config.automatic_checkpoint_naming:
        raise ValueError(
            "load_state: pass input_dir, or use ProjectConfiguration(automatic_checkpoint_naming=True)"
        )
    found = list_checkpoints(config.checkpoints_dir)
    if not found:
        raise CheckpointError(f"load_state: no checkpoint_<n> folder under {config.checkpoints_dir}")
    return found[-1]


def prune(config: ProjectConfiguration) -> None:
    if config.total_limit is None:
        return
    found = list_checkpoints(config.checkpoints_dir)
    for old in found[: max(0, len(found) - config.total_limit)]:
        if not remove_checkpoint(old):
            warnings.warn(
                f"save_state: kept {old} beyond total_limit={config.total_limit}: it holds files its "
                "checkpoint did not write, which are never deleted",
                stacklevel=3,
            )
