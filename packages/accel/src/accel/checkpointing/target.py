"""What a save may replace, and deleting a checkpoint without deleting anything else.

A save only ever replaces what an earlier save wrote. It refuses (CheckpointTargetError, before
writing anything) a path that is a file, the working directory or one of its parents, a mount
point, a folder that holds files but is not an accel checkpoint, and a checkpoint that holds files
its `checkpoint.json` does not list (files a user added: they are never deleted). An empty folder
is used, and so is one holding only empty folders (what a removal killed midway leaves). The
previous checkpoint is removed file by file, as its `checkpoint.json` lists them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from accel.checkpointing.errors import CheckpointTargetError
from accel.checkpointing.format import METADATA_NAME, checkpoint_files, resolved
from accel.checkpointing.lock import FolderLock


def _unlisted_files(folder: Path, listed: set[str]) -> list[str]:
    """Return the files (and links) under `folder` that are not in `listed`, as relative paths."""
    extra = []
    for dirpath, dirnames, filenames in os.walk(folder):
        relative = Path(dirpath).relative_to(folder)
        links = [name for name in dirnames if os.path.islink(os.path.join(dirpath, name))]
        extra += [m for name in filenames + links if (m := (relative / name).as_posix()) not in listed]
    return sorted(extra)


def _holds_no_files(folder: Path) -> bool:
    """Whether `folder` holds no file or link at any depth (only empty folders, if anything)."""
    for dirpath, dirnames, filenames in os.walk(folder):
        if filenames or any(os.path.islink(os.path.join(dirpath, name)) for name in dirnames):
            return False
    return True


def _replaceable_files(folder: Path) -> set[str] | None:
    """Return the files a save or a removal may delete in `folder`, the ones its checkpoint.json
    lists; an empty set when it holds no file (empty, or only the empty folders that a removal
    killed midway leaves); None when it holds files but no valid checkpoint.json."""
    listed = checkpoint_files(folder)
    if listed is None and _holds_no_files(folder):
        return set()
    return listed


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def remove_checkpoint_files(folder: Path, listed: set[str]) -> None:
    """Delete the files in `listed` (checkpoint.json last), then `folder`'s folders that are left empty."""
    for name in sorted(listed - {METADATA_NAME}) + sorted(listed & {METADATA_NAME}):
        with contextlib.suppress(OSError):
            os.unlink(folder / name)
    for dirpath, dirnames, _ in os.walk(folder, topdown=False):
        for name in dirnames:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(dirpath, name))
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def remove_if_only_listed(folder: Path) -> bool:
    """Delete `folder` if it is empty or a checkpoint holding only its listed files; True if it is gone."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    listed = _replaceable_files(folder)
    if listed is None or _unlisted_files(folder, listed):
        return False
    remove_checkpoint_files(folder, listed)
    return not os.path.lexists(folder)


def removal_problem(folder: Path) -> str | None:
    """Say why the rotation of checkpoints must not delete `folder`; None when it may."""
    if os.path.islink(folder):
        return "it is a symbolic link, not a checkpoint folder"
    if not os.path.isdir(folder):
        return "it is not a folder"
    listed = _replaceable_files(folder)
    if listed is None:
        return f"it is not an accel checkpoint (no valid {METADATA_NAME}), and only checkpoints are deleted"
    extra = _unlisted_files(folder, listed)
    if extra:
        return f"it holds files its checkpoint did not write ({_shown(extra)}), which are never deleted"
    return None


def remove_checkpoint(folder: Path) -> bool:
    """Delete the checkpoint at `folder` file by file; return False, deleting nothing, when it holds
    files its checkpoint.json does not list (main process, under the folder's lock)."""
    lock = FolderLock(resolved(folder))
    with contextlib.suppress(OSError):
        lock.acquire()
    try:
        return remove_if_only_listed(resolved(folder))
    finally:
        lock.release()


def refuse_unsafe_target(target: Path) -> None:
    """Refuse a target that save_state must never rename away: a file, the working directory or a
    parent of it, a mount point."""
    try:
        working: Path | None = resolved(Path.cwd())
    except OSError:  # the working directory was deleted
        working = None
    if working is not None and (target == working or target in working.parents):
        raise CheckpointTargetError(
            f"save_state: refusing to save into {target}: it is the working directory or one of its "
            "parents (a save replaces the whole folder); save into a subfolder"
        )
    if os.path.lexists(target) and not os.path.isdir(target):
        raise CheckpointTargetError(
            f"save_state: {target} is a file, not a folder; a checkpoint is a folder: choose another path"
        )
    if os.path.ismount(target):
        raise CheckpointTargetError(
            f"save_state: {target} is a mount point, which a save cannot replace; save into a subfolder"
        )


def refuse_foreign_content(target: Path) -> set[str] | None:
    """Return the files of the checkpoint that a save into `target` replaces (None: there is none;
    an empty set: an empty folder); refuse anything that a save did not write."""
    refuse_unsafe_target(target)
    if not os.path.lexists(target):
        return None
    listed = _replaceable_files(target)
    if listed is None:
        raise CheckpointTargetError(
            f"save_state: {target} holds files but is not an accel checkpoint (no valid {METADATA_NAME}); "
            "a save replaces only a checkpoint: save into a new or empty folder"
        )
    extra = _unlisted_files(target, listed)
    if extra:
        raise CheckpointTargetError(
            f"save_state: {target} holds files its checkpoint did not write ({_shown(extra)}); replacing the "
            "checkpoint would delete them: move them away or save elsewhere"
        )
    return listed
