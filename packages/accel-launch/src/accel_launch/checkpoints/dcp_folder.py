"""A model's sharded checkpoint as the FSDP2 backend writes it: one `torch.distributed.checkpoint` (DCP)
folder per model (`pytorch_model_fsdp`, `pytorch_model_fsdp_1`, ...; Accelerate's `pytorch_model_fsdp_0`
too) inside the `save_state` folder, holding `.metadata` and each rank's `__<rank>_0.distcp`.

Read whole on the CPU of this one process, with no process group, every problem one line naming
its file: DCP itself reports a missing or short file as a multi-rank traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_launch.checkpoints.errors import MergeError
from accel_launch.checkpoints.progress import Progress

METADATA = ".metadata"
# The backend's `model_folder(i)` names and Accelerate's (which numbers the first model too).
MODEL_FOLDER = re.compile(r"pytorch_model_fsdp(?:_(\d+))?")
OPTIMIZER_FOLDER = re.compile(r"optimizer_fsdp(?:_\d+)?")
DATA_FILE = re.compile(r"__\d+_\d+\.distcp")


@dataclass(frozen=True)
class ModelFolder:
    """The DCP folder to merge, and the `save_state` folder it was found in (None when named directly)."""

    path: Path
    found_in: Path | None = None


def model_folders(checkpoint: Path) -> list[Path]:
    """Return the model DCP folders of a `save_state` folder, in the order of their model index."""
    found = []
    for child in checkpoint.iterdir():
        match = MODEL_FOLDER.fullmatch(child.name)
        if match and child.is_dir() and (child / METADATA).is_file():
            found.append((int(match.group(1) or 0), child))
    return [path for _, path in sorted(found)]


def find_model_folder(checkpoint_dir: str | Path) -> ModelFolder:
    """Return the DCP folder `checkpoint_dir` names: itself, or the one model folder inside it.

    A `save_state` folder with several models is refused (each is merged on its own, by naming its
    folder), so that one command never writes two models over each other.
    """
    path = Path(checkpoint_dir)
    if not path.exists():
        raise MergeError(f"{path}: no such checkpoint folder")
    if not path.is_dir():
        raise MergeError(
            f"{path}: not a folder (name the checkpoint folder or its pytorch_model_fsdp folder)"
        )
    if OPTIMIZER_FOLDER.fullmatch(path.name):
        raise MergeError(
            f"{path}: an optimizer's checkpoint, not a model's; name its pytorch_model_fsdp folder instead"
        )
    if (path / METADATA).exists():
        return ModelFolder(path)
    folders = model_folders(path)
    if not folders:
        raise MergeError(
            f"{path}: holds neither {METADATA} (a sharded checkpoint) nor a pytorch_model_fsdp folder "
            "(a save_state checkpoint of SHARDED_STATE_DICT)"
        )
    if len(folders) > 1:
        names = ", ".join(folder.name for folder in folders)
        raise MergeError(
            f"{path}: holds {len(folders)} models ({names}); merge one at a time by naming its folder, "
            f"e.g. {folders[0]}"
        )
    return ModelFolder(folders[0], found_in=path)


def _read_metadata(folder: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata

    path = folder / METADATA
    try:
        metadata = FileSystemReader(folder).read_metadata()
    except FileNotFoundError:
        raise MergeError(f"{path}: missing (not a complete sharded checkpoint)") from None
    except Exception as error:  # an unpickling error, of any kind
        raise MergeError(f"{path}: not a readable checkpoint metadata file ({_cause(error)})") from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise MergeError(f"{path}: not a checkpoint metadata file (it holds {type(metadata).__name__})")
    return metadata


def _check_data_files(folder: Path, metadata: Any) -> int:
    """Raise MergeError naming the first data file the metadata lists that is missing or too short;
    return the bytes of the data files the metadata needs."""
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
        end = int(info.offset) + int(info.length)
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, end in sorted(needed.items()):
        path = folder / name
        if not path.is_file():
            raise MergeError(f"{path}: missing (the checkpoint's {METADATA} lists it)")
        size = path.stat().st_size
        if size < end:
            raise MergeError(f"{path}: truncated ({size} bytes; the checkpoint's {METADATA} needs {end})")
    return sum(needed.values())


def _reader(folder: Path, progress: Progress) -> Any:
    """Return a FileSystemReader that names the data file a read failed in, and counts each file read."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.planner import LoadPlan
    from torch.futures import Future

    class NamingReader(FileSystemReader):
        def read_data(self, plan: LoadPlan, planner: Any) -> Future[None]:
            by_file: dict[str, list[Any]] = {}
            for item in plan.items:
                by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
            for name, items in by_file.items():
                try:
                    super().read_data(LoadPlan(items, plan.storage_data, plan.planner_data), planner)
                except Exception as error:
                    raise MergeError(f"{folder / name}: corrupt ({_cause(error)})") from None
                progress.advance(sum(int(self.storage_data[item.storage_index].length) for item in items))
            done: Future[None] = Future()
            done.set_result(None)
            return done

    return NamingReader(folder)


def _planner() -> Any:
    """Return DCP's planner that builds the state dict from the metadata, reading any non-tensor
    entry with `torch.load(weights_only=True)` (DCP's own reads them with weights_only=False)."""
    import io

    import torch
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.planner import ReadItem

    class WeightsOnlyPlanner(_EmptyStateDictLoadPlanner):
        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            # A pickle weights_only accepts references only tensors and plain containers, so
            # DCP's own unpickling of the same bytes runs no other code.
            torch.load(value, weights_only=True)
            value.seek(0)
            super().load_bytes(read_item, value)

    return WeightsOnlyPlanner()


def read_state_dict(folder: Path, show_progress: bool = False) -> dict[str, Any]:
    """Return the full state dict a DCP folder holds, every tensor whole on the CPU (no process group).

    Needs memory for the whole model. A state dict saved nested under one key (`{"model": {...}}`,
    as Accelerate's FSDP1 saves it) is returned unnested.
    """
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    metadata = _read_metadata(folder)
    progress = Progress("merge-weights: reading", _check_data_files(folder, metadata), show_progress)
    state: dict[str, Any] = {}
    try:
        # What torch's own dcp_to_torch_save does, without writing a torch file in between.
        reader = _reader(folder, progress)
        _load_state_dict(state, storage_reader=reader, planner=_planner(), no_dist=True)
    except CheckpointException as error:
        raise _first_failure(folder, error) from None
    except Exception as error:
        raise MergeError(f"{folder}: cannot read the checkpoint ({_cause(error)})") from None
    finally:
        progress.close()
    if len(state) == 1 and isinstance(next(iter(state.values())), dict):
        state = next(iter(state.values()))
    nested = [key for key, value in state.items() if isinstance(value, dict)]
    if nested:
        raise MergeError(
            f"{folder}: entry {nested[0]!r} is a mapping, not a model weight (not a model's checkpoint?)"
        )
    return state


def _first_failure(folder: Path, error: Any) -> MergeError:
    """Return the MergeError behind DCP's CheckpointException (which wraps each rank's exception)."""
    for failure in error.failures.values():
        cause = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(cause, MergeError):
            return cause
        return MergeError(f"{folder}: cannot read the checkpoint ({_cause(cause)})")
    return MergeError(f"{folder}: cannot read the checkpoint")


def _cause(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1]}" if lines else type(error).__name__


def remove_model_folder(folder: Path) -> list[Path]:
    """Remove the files DCP wrote in `folder` (its `.metadata` and `__*_*.distcp`), then the folder
    if nothing else is left in it; return what is left (nothing this command did not write is removed)."""
    for child in folder.iterdir():
        if child.is_file() and (child.name == METADATA or DATA_FILE.fullmatch(child.name)):
            child.unlink()
    left = sorted(folder.iterdir())
    if not left:
        folder.rmdir()
    return left
