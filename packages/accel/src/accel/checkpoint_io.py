"""Atomic, verified checkpoint folders: written in a temporary sibling, renamed into place, checked on read.

A save writes every file into `.<name>.tmp-<id>` next to the final folder, records each file's size
and a checksum in `checkpoint.json`, and only then renames the folder into place (an existing one
is first renamed away, then deleted). A job killed at any moment therefore leaves either the
previous checkpoint or the new one, complete; `recover_folder` finishes a replacement cut short
between its two renames. Tensor files are written straight to disk and checked by the digest of
what they hold (`content_digest`, near memory speed); small JSON files and files written by hooks
by the sha256 of their bytes. Reading never unpickles arbitrary objects: safetensors, JSON, or
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from accel.content_digest import DIGEST_NAME, content_digest
from accel_state import PartialState, barrier, broadcast_object_list, gather_object
from accel_state.timeouts import named_collective

METADATA_NAME = "checkpoint.json"
FORMAT_NAME = "accel-checkpoint"
FORMAT_VERSION = 2  # 1: every file checked by the sha256 of its bytes (still read)
_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or from another set-up; the message names the file."""


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            sha.update(chunk)
    return sha.hexdigest()


# Digests are computed on a second thread while files are written or read: writing and reading
# wait on the kernel and the disk, the digest on memory bandwidth, so checks cost little wall time.
_checker: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _check_later(function: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """Run `function(*args)` on this process's checking thread (a forked child gets its own)."""
    global _checker
    if _checker is None or _checker[0] != os.getpid():
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-ckpt-check")
        _checker = (os.getpid(), pool)
    return _checker[1].submit(function, *args)


class FolderWriter:
    """Writes the files of one checkpoint into its temporary folder and notes how to check each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._checks: dict[str, concurrent.futures.Future[dict[str, str]]] = {}

    def _check_content(self, name: str, obj: Any) -> None:
        self._checks[name] = _check_later(lambda: {"content": content_digest(obj)})

    def write_torch(self, name: str, obj: Any) -> None:
        self._check_content(name, obj)
        torch.save(obj, self.folder / name)

    def write_safetensors(
        self, name: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
    ) -> None:
        from safetensors.torch import save_file

        self._check_content(name, (tensors, metadata))
        save_file(tensors, self.folder / name, metadata=metadata)

    def write_json(self, name: str, obj: Any) -> None:
        data = json.dumps(obj, indent=1, sort_keys=True).encode()
        (self.folder / name).write_bytes(data)
        self._checks[name] = _check_later(lambda: {"sha256": hashlib.sha256(data).hexdigest()})

    def checks(self) -> dict[str, dict[str, str]]:
        """Return {file name: {"content" or "sha256": hex digest}} of the files written (waits for them)."""
        return {name: future.result() for name, future in self._checks.items()}


def begin_folder(final_dir: Path) -> Path:
    """Return the temporary sibling of `final_dir` that every rank writes into (collective).

    The main process creates it and broadcasts its name, so that all ranks agree on one folder.
    """
    state = PartialState()
    name = [None]
    if state.is_main_process:
        final_dir.parent.mkdir(parents=True, exist_ok=True)
        recover_folder(final_dir)
        temporary = final_dir.parent / f".{final_dir.name}{_TMP_MARK}{uuid.uuid4().hex[:12]}"
        temporary.mkdir()
        name = [str(temporary)]
    with named_collective("save_state (agreeing on the temporary folder)"):
        broadcast_object_list(name)
    return Path(name[0])


def commit_folder(
    temporary: Path, final_dir: Path, writer: FolderWriter, num_processes: int, extra: dict[str, Any]
) -> None:
    """Record the folder's files in checkpoint.json and rename it to `final_dir` (collective)."""
    with named_collective("save_state (waiting for every rank's files)"):
        checks: dict[str, dict[str, str]] = {}
        for rank_checks in gather_object([writer.checks()]):
            checks.update(rank_checks)
    if PartialState().is_main_process:
        files = {}
        for path in sorted(temporary.rglob("*")):
            if path.is_file():
                name = path.relative_to(temporary).as_posix()
                check = checks.get(name) or {"sha256": _file_digest(path)}  # a hook's file
                files[name] = {"size": path.stat().st_size, **check}
        metadata = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "num_processes": num_processes,
            "content_digest": DIGEST_NAME,
            "files": files,
            **extra,
        }
        (temporary / METADATA_NAME).write_text(json.dumps(metadata, indent=1, sort_keys=True))
        _swap_into_place(temporary, final_dir)
    with named_collective("save_state (waiting for the checkpoint to be renamed into place)"):
        barrier()  # nobody reads or replaces the checkpoint before it is in place


def _swap_into_place(temporary: Path, final_dir: Path) -> None:
    old = None
    if final_dir.exists():
        old = final_dir.parent / f".{final_dir.name}{_OLD_MARK}{uuid.uuid4().hex[:12]}"
        os.rename(final_dir, old)
    os.rename(temporary, final_dir)
    _sync_directory(final_dir.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


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
    return (folder / METADATA_NAME).is_file()


def recover_folder(final_dir: Path) -> None:
    """Finish a replacement of `final_dir` that a crash interrupted, and delete abandoned leftovers.

    Between "rename the old checkpoint away" and "rename the new one in" neither is at `final_dir`:
    the newest complete one (the new, else the old) is moved back there. Main process only.
    """
    parent = final_dir.parent
    if not parent.is_dir():
        return
    temporaries = sorted(parent.glob(f".{final_dir.name}{_TMP_MARK}*"), key=_mtime, reverse=True)
    olds = sorted(parent.glob(f".{final_dir.name}{_OLD_MARK}*"), key=_mtime, reverse=True)
    if not final_dir.exists():
        for candidate in [t for t in temporaries if _is_complete(t)] + olds:
            if _is_complete(candidate):
                os.rename(candidate, final_dir)
                break
    for leftover in temporaries + olds:
        if leftover.exists():
            shutil.rmtree(leftover, ignore_errors=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class FolderReader:
    """Reads the files of a complete checkpoint, checking each against checkpoint.json."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        metadata_path = folder / METADATA_NAME
        if not folder.is_dir():
            raise CheckpointError(f"no checkpoint at {folder}: the folder does not exist")
        if not metadata_path.is_file():
            raise CheckpointError(
                f"{metadata_path} is missing: {folder} is not a complete accel checkpoint "
                "(save_state writes this file last)"
            )
        try:
            self.metadata = json.loads(metadata_path.read_text())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{metadata_path} cannot be read as JSON: {error}") from error
        version = self.metadata.get("format_version")
        if self.metadata.get("format") != FORMAT_NAME or not isinstance(version, int):
            raise CheckpointError(f"{metadata_path} does not describe an accel checkpoint")
        if version > FORMAT_VERSION:
            raise CheckpointError(
                f"{metadata_path} has format version {version}; this accel reads up to {FORMAT_VERSION}"
            )
        self.files: dict[str, dict[str, Any]] = self.metadata.get("files", {})
        self.check_sizes()

    @property
    def metadata_path(self) -> Path:
        return self.folder / METADATA_NAME

    def check_sizes(self) -> None:
        """Raise CheckpointError naming the first listed file that is missing or has the wrong size."""
        for name, entry in self.files.items():
            path = self.folder / name
            try:
                size = path.stat().st_size
            except OSError:
                raise CheckpointError(f"{path} is missing (listed in {self.metadata_path})") from None
            if size != entry["size"]:
                raise CheckpointError(
                    f"{path} is truncated or corrupt: {size} bytes, "
                    f"{self.metadata_path} records {entry['size']}"
                )

    def has(self, name: str) -> bool:
        return name in self.files

    def read(self, name: str) -> Any:
        """Return what file `name` holds, checked (see `read_all`)."""
        return next(self.read_all([name]))

    def read_all(self, names: list[str]) -> Iterator[Any]:
        """Yield what each file holds, in order, each only once checked against checkpoint.json.

        `.safetensors` files give (tensors, metadata), `.json` files their data, the others
        torch.load(weights_only=True) onto the CPU. File k+1 is loaded while a second thread checks
        file k: the loading waits on the disk and the kernel, the digest on memory bandwidth.
        """
        pending: concurrent.futures.Future[Any] | None = None
        for name in names:
            try:
                value = self._load(name)
            except CheckpointError:
                if pending is not None:
                    pending.result()  # an earlier file's verdict is reported first
                raise
            checked = _check_later(self._checked, name, value)
            if pending is not None:
                yield pending.result()
            pending = checked
        if pending is not None:
            yield pending.result()

    def _load(self, name: str) -> Any:
        path = self.folder / name
        entry = self.files.get(name)
        if entry is None:
            raise CheckpointError(
                f"{path} is not part of the checkpoint ({self.metadata_path} does not list it)"
            )
        if "sha256" in entry and _file_digest(path) != entry["sha256"]:
            raise CheckpointError(
                f"{path} is corrupt: its sha256 differs from the one recorded in {self.metadata_path}"
            )
        load, what = _LOADERS.get(path.suffix, _TORCH_LOADER)
        try:
            return load(path)
        except Exception as error:  # noqa: BLE001 - reported with the file's name
            refused = _refused_global(error)
            if refused:
                raise CheckpointError(f"{path} cannot be loaded as {what}: it holds {refused}") from error
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"{path} is corrupt: it cannot be loaded as {what}: {reason}") from error

    def _checked(self, name: str, value: Any) -> Any:
        expected = self.files[name].get("content")
        if expected is not None and content_digest(value) != expected:
            raise CheckpointError(
                f"{self.folder / name} is corrupt: what it holds differs from what was saved "
                f"(its content digest does not match {self.metadata_path})"
            )
        return value


def _load_torch(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def _load_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}, handle.metadata() or {}


_TORCH_LOADER = (_load_torch, "a weights-only torch file (tensors and plain containers only)")
_LOADERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    ".safetensors": (_load_safetensors, "safetensors"),
    ".json": (lambda path: json.loads(path.read_bytes()), "JSON"),
}


def _refused_global(error: Exception) -> str | None:
    """Name the object torch.load(weights_only=True) refused to unpickle; None for other errors."""
    text = str(error)
    if "Weights only load failed" not in text:
        return None
    match = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    return f"{match.group(1) if match else 'an object'}, which loading would have to unpickle (refused)"
