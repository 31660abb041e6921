"""Where save_state writes and load_state reads: `checkpoint_<n>` folders, and how many are kept.

With `ProjectConfiguration(automatic_checkpoint_naming=True)` a save goes into the next
`checkpoint_<n>` under the project folder, a load reads the newest, and saves beyond
`total_limit` delete the oldest (see `prune`: never the one just written, never one numbered after
it, never a folder holding anything else, and each deletion named).
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.format import METADATA_NAME, checkpoint_files
from accel.checkpointing.target import removal_problem, remove_checkpoint
from accel.options.project_config import ProjectConfiguration

CHECKPOINT_FOLDER = re.compile(r"checkpoint_(\d+)")
logger = logging.getLogger(__name__)


def project_configuration(accelerator: Any) -> ProjectConfiguration | None:
    return getattr(accelerator, "project_configuration", None)


def list_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """Return the `checkpoint_<n>` folders under `checkpoints_dir`, oldest (smallest n) first (files of
    such names are no checkpoints)."""
    folder = Path(checkpoints_dir)
    if not folder.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := CHECKPOINT_FOLDER.fullmatch(p.name)) and p.is_dir()
    ]
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
    complete = [folder for folder in found if checkpoint_files(folder) is not None]
    if not complete:
        others = f" (only {_names(found)}, which hold no {METADATA_NAME})" if found else ""
        raise CheckpointError(
            f"load_state: no accel checkpoint_<n> folder under {config.checkpoints_dir}{others}"
        )
    return complete[-1]  # folders of this naming that no save wrote are not checkpoints


def prune(config: ProjectConfiguration, saved: Path) -> list[Path]:
    """Delete the oldest checkpoints beyond `total_limit`, now that `saved` is in place; return them.

    Oldest means numbered below `saved`: only `checkpoint_<n>` folders with n smaller than the one
    just written are deleted, newest kept, and only when they hold nothing but their checkpoint's
    files. The one just written is never deleted, nor one numbered after it (left by an earlier run
    that went further: it is kept, with a warning, since `load_state()` would pick it as the newest).
    Each deletion is logged; each checkpoint kept beyond the limit is named in a warning.
    """
    if config.total_limit is None:
        return []
    number = _number(saved)
    found = [(n, p) for p in list_checkpoints(config.checkpoints_dir) if (n := _number(p)) is not None]
    # Only a later accel checkpoint is one load_state() would pick: other folders are not checkpoints.
    later = [p for n, p in found if number is not None and n > number and checkpoint_files(p) is not None]
    older = [p for n, p in found if number is not None and n < number]
    if later:
        they = "it" if len(later) == 1 else "them"
        warnings.warn(
            f"save_state: kept {_names(later)} under {config.checkpoints_dir} beyond total_limit="
            f"{config.total_limit}: numbered after the checkpoint just saved, so rotation never deletes "
            f"{they}, and load_state() without a folder loads {later[-1].name}, not {saved.name} (left by "
            f"an earlier run?); load_state() the newest before saving, or move {they} away",
            stacklevel=3,
        )
    removed = []
    for old in older[: max(0, len(older) - (config.total_limit - 1))]:
        problem = removal_problem(old)
        if problem is None and remove_checkpoint(old):
            removed.append(old)
            logger.info("save_state: removed %s (total_limit=%d)", old, config.total_limit)
            continue
        warnings.warn(
            f"save_state: kept {old} beyond total_limit={config.total_limit}: "
            f"{problem or 'it holds files its checkpoint did not write, which are never deleted'}",
            stacklevel=3,
        )
    return removed


def _number(folder: Path) -> int | None:
    match = CHECKPOINT_FOLDER.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def _names(folders: list[Path]) -> str:
    return ", ".join(p.name for p in folders)
