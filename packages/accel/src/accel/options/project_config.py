"""`ProjectConfiguration`: where a run keeps its checkpoints and logs, and how many to keep."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ProjectConfiguration:
    """Accelerate's project settings: folders, automatic checkpoint naming and retention.

    With `automatic_checkpoint_naming`, `save_state()` writes `project_dir/checkpoints/checkpoint_<n>`
    (`n` = `iteration`, which each save advances) and keeps only the newest `total_limit` of them.
    """

    project_dir: str | os.PathLike[str] | None = None
    logging_dir: str | os.PathLike[str] | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        if self.total_limit is not None and self.total_limit < 1:
            raise ValueError(f"ProjectConfiguration: total_limit must be at least 1, got {self.total_limit}")

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set `project_dir` (and `logging_dir`, unless one was given) to `project_dir`."""
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir

    @property
    def checkpoints_dir(self) -> Path:
        """Return the folder that holds the automatically named checkpoints."""
        if self.project_dir is None:
            raise ValueError(
                "ProjectConfiguration: automatic_checkpoint_naming needs a project_dir "
                "(Accelerator(project_dir=...) or ProjectConfiguration(project_dir=...))"
            )
        return Path(self.project_dir) / "checkpoints"
