"""Reading a checkpoint: every file checked against checkpoint.json before anything is applied.

A load checks every file before anything is applied; names in `checkpoint.json` that lead outside
the folder are refused. Reading never unpickles arbitrary objects: safetensors, JSON, or
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.content_digest import DIGEST_NAME, DIGEST_V2, digest_of
from accel.checkpointing.content_digest_v1 import DIGEST_NAME as DIGEST_V1
from accel.checkpointing.content_digest_v1 import content_digest_v1
from accel.checkpointing.digests import check_later, file_digest
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.format import FORMAT_NAME, FORMAT_VERSION, METADATA_NAME, member_problem, resolved
from accel_launch.checkpoints.progress import NO_PROGRESS, Progress

KNOWN_DIGESTS = (DIGEST_NAME, DIGEST_V2, DIGEST_V1)


class FolderReader:
    """Reads the files of a complete checkpoint, checking each against checkpoint.json."""

    def __init__(self, folder: Path, progress: Progress = NO_PROGRESS) -> None:
        self.folder = folder
        self.progress = progress  # advanced as each file is read
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
        if not isinstance(self.metadata, dict):
            raise CheckpointError(f"{metadata_path} does not describe an accel checkpoint")
        version = self.metadata.get("format_version")
        if self.metadata.get("format") != FORMAT_NAME or not isinstance(version, int):
            raise CheckpointError(f"{metadata_path} does not describe an accel checkpoint")
        if version > FORMAT_VERSION:
            raise CheckpointError(
                f"{metadata_path} has format version {version}; this accel reads up to {FORMAT_VERSION}"
            )
        self.files: dict[str, dict[str, Any]] = self.metadata.get("files", {})
        # A checkpoint of format 2 records v1 digests (older ones record none: sha256 only).
        self.digest_name = self.metadata.get("content_digest", DIGEST_V1)
        if self.digest_name not in KNOWN_DIGESTS:
            known = ", ".join(repr(name) for name in KNOWN_DIGESTS)
            raise CheckpointError(
                f"{metadata_path} records its files' digests as {self.digest_name!r}, which this accel "
                f"does not know (it checks {known}): load it with the accel that saved it"
            )
        self.check_names()
        self.check_sizes()

    @property
    def metadata_path(self) -> Path:
        return self.folder / METADATA_NAME

    def check_names(self) -> None:
        """Raise CheckpointError for the first listed file that is not inside the folder (absolute,
        `..`, a symbolic link leading out): such a checkpoint.json would make a load open other files."""
        root = resolved(self.folder)
        if not isinstance(self.files, dict):
            raise CheckpointError(f"{self.metadata_path} does not describe an accel checkpoint")
        for name, entry in self.files.items():
            problem = member_problem(root, name)
            if problem is not None:
                raise CheckpointError(f"{self.metadata_path} lists {name!r}, which {problem}: refused")
            if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
                raise CheckpointError(f"{self.metadata_path} records no size for {name!r}: it is corrupt")

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

    def read_checked(self, names: list[str], also_check: Sequence[str] = ()) -> dict[str, Any]:
        """Return {name: what it holds} for `names`, once every one of them and every file in
        `also_check` (by the sha256 of its bytes, on the checking thread) passed its checks."""
        bytes_checks = [check_later(self._check_bytes, name) for name in also_check]
        values = dict(zip(names, self.read_all(names), strict=True))
        for check in bytes_checks:
            check.result()
        return values

    def read_all(self, names: list[str]) -> Iterator[Any]:
        """Yield what each file holds, in order, each only once checked against checkpoint.json.

        `.safetensors` files give (tensors, metadata), `.json` files their data, the others
        torch.load(weights_only=True) onto the CPU; the tensors of both are views of the mapped
        file (`accel.checkpointing.owned_memory` says why, and who copies them). Each file is
        checked as soon as it is loaded, on this thread: a check hashes the page cache in place
        (large objects on several threads, `digest_of`). Measured on 2 cores, handing the check
        to a second thread, or hashing a torch file's storages while they were read, saved nothing:
        loading and hashing both wait on memory.
        """
        for name in names:
            value, size = self._load(name), int(self.files[name]["size"])
            self.progress.advance(size)
            yield self._checked(name, value)

    def _check_bytes(self, name: str, data: bytes | None = None) -> None:
        """Check file `name` by the sha256 of its bytes (`data`, when they were read already)."""
        expected = self.files[name].get("sha256")
        if expected is None:
            return
        found = file_digest(self.folder / name) if data is None else hashlib.sha256(data).hexdigest()
        if found != expected:
            raise CheckpointError(
                f"{self.folder / name} is corrupt: its sha256 differs from the one recorded in "
                f"{self.metadata_path}"
            )

    def _load(self, name: str) -> Any:
        """Return what file `name` holds, unchecked."""
        path = self.folder / name
        if name not in self.files:
            raise CheckpointError(
                f"{path} is not part of the checkpoint ({self.metadata_path} does not list it)"
            )
        if path.suffix == ".json":  # small: read once, checked and parsed from the same bytes
            return self._load_json(name, path)
        self._check_bytes(name)
        load, what = _LOADERS.get(path.suffix, _TORCH_LOADER)
        try:
            return load(path)
        except Exception as error:  # noqa: BLE001 - reported with the file's name
            refused = _refused_global(error)
            if refused:
                raise CheckpointError(f"{path} cannot be loaded as {what}: it holds {refused}") from error
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"{path} is corrupt: it cannot be loaded as {what}: {reason}") from error

    def _load_json(self, name: str, path: Path) -> Any:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise CheckpointError(f"{path} cannot be read: {error}") from error
        self._check_bytes(name, data)
        try:
            return json.loads(data)
        except ValueError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"{path} is corrupt: it cannot be loaded as JSON: {reason}") from error

    def _checked(self, name: str, value: Any) -> Any:
        entry = self.files[name]
        expected = entry.get("content")
        if expected is None:
            return value
        if self.digest_name == DIGEST_V1:
            if content_digest_v1(value) != expected:
                raise CheckpointError(f"{self.folder / name} is corrupt: {_DIFFERS} (its {DIGEST_V1} digest "
                                      f"does not match {self.metadata_path})")  # fmt: skip
            return value
        found = digest_of(value, algorithm=self.digest_name)
        if found.whole != expected:
            what = _differing_tensors(name, entry.get("tensors"), found.tensors) or _DIFFERS
            raise CheckpointError(
                f"{self.folder / name} is corrupt: {what} (its xxh3-128 digest does not match "
                f"{self.metadata_path})"
            )
        return value


_DIFFERS = "what it holds differs from what was saved"


def _differing_tensors(name: str, recorded: Any, found: dict[str, str]) -> str | None:
    """Say which tensors of file `name` differ from the saved ones; None when none does (or the
    checkpoint recorded none), i.e. the structure around them changed."""
    if not isinstance(recorded, dict):
        return None
    paths = [p for p, digest in found.items() if recorded.get(p) != digest]
    paths += [p for p in recorded if p not in found]
    if not paths:
        return None
    if name.endswith(".safetensors"):  # (tensors, metadata): a tensor's path is "0.<its key>"
        paths = [p.removeprefix("0.") for p in paths]
    shown = ", ".join(repr(p) for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (
        f"tensor {shown} differs from what was saved"
        if len(paths) == 1
        else f"tensors {shown} differ from what was saved"
    )


def _load_torch(path: Path) -> Any:
    """Load a torch file mapped, not copied: its tensors are views of the page cache until restored
    (`accel.checkpointing.owned_memory`). A file that cannot be mapped (torch's format before zip
    archives, a file system without mmap) is read as before; a corrupt one fails that read too, which
    gives the error reported."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - read again below, where its own error is raised
        pass
    return torch.load(path, map_location="cpu", weights_only=True)


def _load_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}, handle.metadata() or {}


_TORCH_LOADER = (_load_torch, "a weights-only torch file (tensors and plain containers only)")
_LOADERS: dict[str, tuple[Callable[[Path], Any], str]] = {".safetensors": (_load_safetensors, "safetensors")}


def _refused_global(error: Exception) -> str | None:
    """Name the object torch.load(weights_only=True) refused to unpickle; None for other errors."""
    text = str(error)
    if "Weights only load failed" not in text:
        return None
    match = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if match is None:  # an opcode the unpickler does not know: a corrupt file, not a refused object
        return None
    return f"{match.group(1)}, which loading would have to unpickle (refused)"
