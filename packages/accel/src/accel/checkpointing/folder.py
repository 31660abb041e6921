"""Atomic checkpoint folders: written in a temporary sibling, then renamed into place.

A save writes every file into `.<name>.tmp-<id>` next to the final folder, records each file's size
and a checksum in `checkpoint.json`, and only then renames the folder into place. A job killed at
any moment therefore leaves either the previous checkpoint or the new one, complete;
`recover_folder` finishes a replacement cut short between its two renames.

Temporary folders have unique names; a save deletes another save's temporary folder only once that
save is over (it no longer holds the folder's lock), and removes its own on any failure.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from accel.checkpointing.content_digest import DIGEST_NAME
from accel.checkpointing.digests import file_digest, write_later
from accel.checkpointing.errors import CheckpointError, raise_any_failure
from accel.checkpointing.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    METADATA_NAME,
    checkpoint_files,
    member_problem,
    resolved,
)
from accel.checkpointing.lock import FolderLock
from accel.checkpointing.target import (
    refuse_foreign_content,
    refuse_unsafe_target,
    remove_checkpoint_files,
    remove_if_only_listed,
)
from accel.checkpointing.writer import FolderWriter, compact_json, write_bytes_file, writing
from accel_state import PartialState, broadcast_object_list, gather_object
from accel_state.process_group.timeouts import named_collective

_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"


# Saving: begin, commit, abandon -----------------------------------------------------------------------
@dataclasses.dataclass
class PendingFolder:
    """A save in progress: the folder every rank writes into and, on the main process, the lock it holds."""

    final_dir: Path
    temporary: Path
    lock: FolderLock | None = None  # main process only

    @property
    def on_main(self) -> bool:
        return self.lock is not None


def _begin_on_main(target: Path) -> PendingFolder:
    refuse_unsafe_target(target)
    with writing(target.parent, "creating"):
        target.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(target)
    with writing(lock.path, "creating"):
        lock.acquire()
    try:
        _recover(target)
        refuse_foreign_content(target)  # checked again just before the rename
        temporary = target.parent / f".{target.name}{_TMP_MARK}{uuid.uuid4().hex[:12]}"
        with writing(temporary, "creating"):
            temporary.mkdir()
    except BaseException:
        lock.release()
        raise
    return PendingFolder(target, temporary, lock)


def _summary(error: BaseException | None) -> str | None:
    """Return one line saying what `error` was, to report it to the other ranks."""
    if error is None:
        return None
    line = (str(error).strip().splitlines() or [""])[0]
    return line if isinstance(error, CheckpointError) else f"{type(error).__name__}: {line}"


def agree_on_folder(operation: str, folder: Path) -> None:
    """Raise CheckpointError on every rank unless every rank names the same folder (collective).

    Only the main process writes the shared files, so a rank passing another folder would get
    back a path where nothing was written (or, loading, restore other states than its peers)."""
    state = PartialState()
    if state.num_processes == 1:
        return
    with named_collective(f"{operation} (comparing every rank's folder)"):
        folders = gather_object([os.path.abspath(folder)])
    if len(set(folders)) == 1:
        return
    ranks: dict[str, list[int]] = {}
    for rank, name in enumerate(folders):
        ranks.setdefault(name, []).append(rank)
    shown = ", ".join(f"{_ranks(numbers)} {name!r}" for name, numbers in ranks.items())
    raise CheckpointError(
        f"{operation}: ranks disagree on the folder: {shown}; every rank must pass the same folder"
    )


def _ranks(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"rank {numbers[0]}"
    listed = ", ".join(str(n) for n in numbers[:4])
    return f"ranks {listed}" + (f" and {len(numbers) - 4} more" if len(numbers) > 4 else "")


def begin_folder(final_dir: Path) -> PendingFolder:
    """Return the save of `final_dir` in progress, with the temporary folder every rank writes into
    (collective).

    Every rank must name the same `final_dir` (else an error on every rank, before anything is
    written). The main process checks the target, takes its lock, creates the folder and broadcasts
    its name; a refusal is raised on every rank.
    """
    agree_on_folder("save_state", final_dir)
    target = resolved(final_dir)
    outcome: list[Any] = [None]
    pending: PendingFolder | None = None
    failure: Exception | None = None
    if PartialState().is_main_process:
        try:
            pending = _begin_on_main(target)
            outcome = [str(pending.temporary)]
        except Exception as error:
            failure = error
            outcome = [error if isinstance(error, CheckpointError) else CheckpointError(_summary(error))]
    try:
        with named_collective("save_state (agreeing on the temporary folder)"):
            broadcast_object_list(outcome)
    except BaseException:
        if pending is not None:
            abandon_folder(pending)
        raise
    if failure is not None:
        raise failure
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return pending or PendingFolder(target, Path(str(outcome[0])))


def abandon_folder(pending: PendingFolder) -> None:
    """Remove the save's own temporary folder (if still there) and release its lock (main process)."""
    if not pending.on_main:
        return
    try:
        if os.path.isdir(pending.temporary) and not os.path.islink(pending.temporary):
            shutil.rmtree(pending.temporary, ignore_errors=True)
    finally:
        assert pending.lock is not None
        pending.lock.release()


def commit_folder(
    pending: PendingFolder,
    writer: FolderWriter,
    num_processes: int,
    extra: dict[str, Any],
    failure: Exception | None = None,
) -> None:
    """Record every rank's files in checkpoint.json and rename the folder into place (collective).

    When a rank failed to write its files (its `failure`), nothing is renamed: the temporary folder
    is removed and every rank raises (that rank its own error). The lock is released either way.
    """
    try:
        checks: dict[str, dict[str, Any]] = {}
        if failure is None:
            try:
                checks = writer.checks()
            except Exception as error:  # noqa: BLE001 - reported to every rank
                failure = error
        with named_collective("save_state (waiting for every rank's files)"):
            reports = gather_object([(checks, _summary(failure))])
        raise_any_failure(failure, [message for _, message in reports], "save_state")
        outcome: list[str | None] = [None]
        if pending.on_main:
            try:
                for rank_checks, _ in reports:
                    checks.update(rank_checks)
                _write_metadata(pending.temporary, checks, num_processes, extra)
                previous = refuse_foreign_content(pending.final_dir)
                _swap_into_place(pending.temporary, pending.final_dir, previous)
            except Exception as error:  # noqa: BLE001 - reported to every rank
                failure = error
                outcome = [_summary(error)]
        # Nobody reads or replaces the checkpoint before it is in place (the others wait for this).
        with named_collective("save_state (waiting for the checkpoint to be renamed into place)"):
            broadcast_object_list(outcome)
        raise_any_failure(failure, outcome, "save_state")
    finally:
        abandon_folder(pending)


def _write_metadata(
    temporary: Path, checks: dict[str, dict[str, Any]], num_processes: int, extra: dict[str, Any]
) -> None:
    root = resolved(temporary)
    files = {}
    for path in sorted(temporary.rglob("*")):
        name = path.relative_to(temporary).as_posix()
        problem = member_problem(root, name) if path.is_symlink() else None
        if problem is not None:  # a hook's link: a load would refuse the checkpoint
            raise CheckpointError(f"save_state: {path} {problem}; a checkpoint holds only its own files")
        if path.is_file():
            check = checks.get(name) or {"sha256": file_digest(path)}  # a hook's file
            files[name] = {"size": path.stat().st_size, **check}
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "num_processes": num_processes,
        "content_digest": DIGEST_NAME,
        "files": files,
        **extra,
    }
    write_bytes_file(temporary / METADATA_NAME, compact_json(metadata))


def _swap_into_place(temporary: Path, final_dir: Path, previous: set[str] | None) -> None:
    """Rename `temporary` to `final_dir`; the checkpoint there before (its files: `previous`) is removed."""
    old = None
    with writing(final_dir, f"renaming {temporary.name} to"):
        if previous is not None:
            old = final_dir.parent / f".{final_dir.name}{_OLD_MARK}{uuid.uuid4().hex[:12]}"
            os.rename(final_dir, old)
        try:
            os.rename(temporary, final_dir)
        except OSError:
            if old is not None:
                os.rename(old, final_dir)
            raise
    # The rename reaches the disk with the journal's next commit; a power cut before it leaves the
    # previous checkpoint (the journal keeps renames and removals in order). Syncing the directory
    # on the writing thread makes it durable soon after, without holding the caller.
    write_later(_sync_directory, final_dir.parent)
    if old is not None and previous is not None:
        remove_checkpoint_files(old, previous)


def _sync_directory(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_complete(folder: Path) -> bool:
    # A valid checkpoint.json, not merely one: a save killed while writing it leaves it empty.
    return checkpoint_files(folder) is not None


def _leftovers(final_dir: Path, mark: str) -> list[Path]:
    """Return the `.<name><mark><hex id>` siblings of `final_dir`, newest first."""
    prefix = f".{final_dir.name}{mark}"  # no regex: compiling one per folder name cost a save 0.2 ms
    try:
        names = os.listdir(final_dir.parent)
    except OSError:
        return []
    found = [n for n in names if n.startswith(prefix) and _is_hex(n[len(prefix) :])]
    return sorted((final_dir.parent / n for n in found), key=_mtime, reverse=True)


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def _recover(final_dir: Path) -> None:
    """Move the newest complete leftover into place if nothing is there, then delete the leftovers
    (under the lock: their saves are over). An `.old-` one holding files no save wrote is kept."""
    temporaries = _leftovers(final_dir, _TMP_MARK)
    olds = _leftovers(final_dir, _OLD_MARK)
    if not os.path.lexists(final_dir):
        for candidate in [t for t in temporaries if _is_complete(t)] + [o for o in olds if _is_complete(o)]:
            os.rename(candidate, final_dir)
            break
    for temporary in temporaries:
        if os.path.isdir(temporary) and not os.path.islink(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
    for old in olds:
        remove_if_only_listed(old)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def lock_for_reading(folder: Path) -> FolderLock:
    """Return the lock on `folder`, held, once a replacement of it that a crash cut short is finished.

    Main process only. A folder beside which no lock file can be created (read-only) is read
    unlocked, as it is: nothing can be saved there either.
    """
    target = resolved(folder)
    lock = FolderLock(target)
    try:
        lock.acquire()
    except OSError:
        return lock
    try:
        _recover(target)
    except BaseException:
        lock.release()
        raise
    return lock


def recover_folder(final_dir: Path) -> None:
    """Finish a replacement of `final_dir` that a crash interrupted, and delete abandoned leftovers.

    Between "rename the old checkpoint away" and "rename the new one in" neither is at `final_dir`:
    the newest complete one (the new, else the old) is moved back there. Main process only; waits
    for a save into `final_dir` in progress, whose temporary folder is not abandoned.
    """
    lock_for_reading(final_dir).release()
