"""checkpoint.json: the file that makes a folder an accel checkpoint, and the files it lists.

save_state writes it last, recording each file's size and a checksum; a folder without a valid one
is no checkpoint. A listed name must be a file inside the folder: names that lead outside it
(absolute, `..`, a symbolic link leading out) are refused, by a load and by a save replacing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

METADATA_NAME = "checkpoint.json"
FORMAT_NAME = "accel-checkpoint"
FORMAT_VERSION = 3  # 1: sha256 of each file; 2: v1 content digests; 3: xxh3-128 (all still read)


def resolved(folder: Path) -> Path:
    """Return `folder` absolute, through symbolic links (a link to a checkpoint replaces its target)."""
    return Path(os.path.realpath(folder))


def member_problem(root: Path, name: Any) -> str | None:
    """Say why `name`, listed in a checkpoint.json, is not a file inside `root` (resolved); None if it is."""
    if not isinstance(name, str) or not name:
        return "is not a file name"
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        return "leaves the checkpoint folder"
    # Without a symbolic link on the way, `root / name` is inside `root` (resolved, no `..`): one
    # lstat per part, where resolving the whole path costs one per part of the absolute path.
    path = root
    for part in pure.parts:
        path = path / part
        if path.is_symlink():
            break
    else:
        return None
    if not (root / pure).resolve().is_relative_to(root):
        return "is a symbolic link that leads outside the checkpoint folder"
    return None


def checkpoint_files(folder: Path) -> set[str] | None:
    """Return the files of the accel checkpoint at `folder`, checkpoint.json included; None when
    `folder` holds no valid checkpoint.json."""
    try:
        metadata = json.loads((folder / METADATA_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
        return None
    files = metadata.get("files")
    if not isinstance(files, dict):
        return None
    root = resolved(folder)
    if any(member_problem(root, name) is not None for name in files):
        return None
    return {*files, METADATA_NAME}
