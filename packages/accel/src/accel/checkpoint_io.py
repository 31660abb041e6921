"""Atomic, verified checkpoint folders: written in a temporary sibling, renamed into place, checked on read.

A save writes every file into `.<name>.tmp-<id>` next to the final folder, records each file's size
and sha256 in `checkpoint.json`, and only then renames the folder into place (an existing one is
first renamed away, then deleted). A job killed at any moment therefore leaves either the previous
checkpoint or the new one, complete; `recover_folder` finishes a replacement cut short between
its two renames. Reading never unpickles arbitrary objects: safetensors, JSON, or
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from accel_state import PartialState, barrier, broadcast_object_list
from accel_state.timeouts import named_collective

METADATA_NAME = "checkpoint.json"
FORMAT_NAME = "accel-checkpoint"
FORMAT_VERSION = 1
_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or from another set-up; the message names the file."""


def _digest(data: Any) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            sha.update(chunk)
    return sha.hexdigest()


# One background thread hashes a file's bytes while the next step (writing them, parsing them) runs;
# hashlib releases the GIL, so the checksum costs little wall time.
_HASHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-ckpt-hash")


class FolderWriter:
    """Writes the files of one checkpoint into its temporary folder, hashing each as it goes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._digests: dict[str, concurrent.futures.Future[str]] = {}

    def write_bytes(self, name: str, data: bytes | memoryview) -> None:
        self._digests[name] = _HASHER.submit(_digest, data)
        with (self.folder / name).open("wb") as handle:
            handle.write(data)

    def write_torch(self, name: str, obj: Any) -> None:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        self.write_bytes(name, buffer.getbuffer())

    def write_safetensors(
        self, name: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
    ) -> None:
        from safetensors.torch import save

        self.write_bytes(name, save(tensors, metadata=metadata))

    def write_json(self, name: str, obj: Any) -> None:
        self.write_bytes(name, json.dumps(obj, indent=1, sort_keys=True).encode())

    def digests(self) -> dict[str, str]:
        """Return {file name: sha256} of the files written so far (waits for the hashing)."""
        return {name: future.result() for name, future in self._digests.items()}


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
        barrier()
    if PartialState().is_main_process:
        digests = writer.digests()
        files = {}
        for path in sorted(temporary.rglob("*")):
            if path.is_file():
                name = path.relative_to(temporary).as_posix()
                sha = digests.get(name) or _file_digest(path)
                files[name] = {"size": path.stat().st_size, "sha256": sha}
        metadata = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "num_processes": num_processes,
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

    def _parse(self, name: str, parse: Callable[[bytes], Any], what: str) -> Any:
        path = self.folder / name
        if name not in self.files:
            raise CheckpointError(
                f"{path} is not part of the checkpoint ({self.metadata_path} does not list it)"
            )
        data = path.read_bytes()
        digest = _HASHER.submit(_digest, data)
        try:
            value = parse(data)
            error = None
        except Exception as caught:  # noqa: BLE001 - reported below, after the checksum verdict
            value, error = None, caught
        if digest.result() != self.files[name]["sha256"]:
            raise CheckpointError(
                f"{path} is corrupt: its sha256 differs from the one recorded in {self.metadata_path}"
            )
        if error is not None:
            raise CheckpointError(f"{path} cannot be loaded as {what}: {error}") from error
        return value

    def read_torch(self, name: str) -> Any:
        """Return the object in `name`, loaded with torch.load(weights_only=True) onto the CPU."""

        def parse(data: bytes) -> Any:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)

        return self._parse(name, parse, "a weights-only torch file (tensors and plain containers only)")

    def read_safetensors(self, name: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """Return the tensors in safetensors file `name` and its string metadata."""

        def parse(data: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
            from safetensors.torch import load

            header_length = int.from_bytes(data[:8], "little")
            header = json.loads(data[8 : 8 + header_length])
            return load(data), header.get("__metadata__", {}) or {}

        return self._parse(name, parse, "safetensors")

    def read_json(self, name: str) -> Any:
        return self._parse(name, json.loads, "JSON")
