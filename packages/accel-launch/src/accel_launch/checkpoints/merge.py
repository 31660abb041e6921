"""Merge a model's sharded checkpoint into one set of weight files (Accelerate's `merge_fsdp_weights`).

The whole model is read into this process's memory on the CPU (no process group, no GPU), written
under partial names, read back and compared tensor by tensor, and only then renamed into place;
the checkpoint folder is removed, when asked, only after that.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_launch.checkpoints.dcp_folder import (
    ModelFolder,
    find_model_folder,
    read_state_dict,
    remove_model_folder,
)
from accel_launch.checkpoints.errors import MergeError
from accel_launch.checkpoints.progress import Progress
from accel_launch.checkpoints.weight_files import (
    DEFAULT_MAX_SHARD_SIZE,
    existing_outputs,
    move_into_place,
    nbytes,
    parse_size,
    plan_files,
    remove,
    verify_partials,
    write_partials,
)


@dataclass(frozen=True)
class MergeResult:
    """What a merge read, wrote and removed."""

    source: ModelFolder
    written: list[Path]
    tensors: int
    total_bytes: int
    replaced: list[Path]
    removed_source: bool = False
    left_in_source: tuple[Path, ...] = ()


def merge_weights(
    checkpoint_dir: str | Path,
    output_path: str | Path,
    *,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
    overwrite: bool = False,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    show_progress: bool = True,
) -> MergeResult:
    """Write the weights of the sharded checkpoint `checkpoint_dir` into the folder `output_path`.

    `checkpoint_dir` is a model's DCP folder (`pytorch_model_fsdp`) or the `save_state` folder
    holding exactly one. The output is `model.safetensors` (`pytorch_model.bin` without
    `safe_serialization`), or shards and an index above `max_shard_size`. Files of an earlier merge
    in `output_path` are refused unless `overwrite` (then they are replaced, and their stale
    shards removed); other files there are left alone. With `remove_checkpoint_dir` the DCP folder's
    files are removed after the written files were read back equal. A long merge shows progress
    bars on a terminal (`show_progress`; see `accel_launch.checkpoints.progress`).
    """
    limit = parse_size(max_shard_size)
    source = find_model_folder(checkpoint_dir)
    output = Path(output_path)
    if output.exists() and not output.is_dir():
        raise MergeError(f"{output}: a file, not a folder (OUTPUT_PATH is the folder to write into)")
    earlier = existing_outputs(output, safe_serialization)
    if earlier and not overwrite:
        raise MergeError(f"{earlier[0]} exists; pass --overwrite to replace it")
    if safe_serialization and importlib.util.find_spec("safetensors") is None:
        raise MergeError(
            "writing model.safetensors needs the safetensors package (pip install safetensors); "
            "or pass --unsafe_serialization for pytorch_model.bin"
        )
    state = read_state_dict(source.path, show_progress)
    _check_mergeable(source.path, state, safe_serialization)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise MergeError(f"{output}: cannot create the folder ({error.strerror or error})") from None
    files = plan_files(output, state, safe_serialization, limit)
    total_bytes = sum(nbytes(value) for value in state.values())
    progress = Progress("merge-weights: writing and checking", 2 * total_bytes, show_progress)
    try:
        partials = write_partials(files, progress)
        try:
            compared = verify_partials(files, partials, progress)
            written = move_into_place(files, partials)
        except BaseException:
            remove(partials.values())
            raise
    finally:
        progress.close()
    stale = [path for path in earlier if path.name not in files.names]
    remove(stale)
    result = MergeResult(
        source=source,
        written=written,
        tensors=compared,
        total_bytes=total_bytes,
        replaced=earlier,
    )
    if not remove_checkpoint_dir:
        return result
    left = remove_model_folder(source.path)
    return dataclasses.replace(result, removed_source=not left, left_in_source=tuple(left))


def _check_mergeable(folder: Path, state: dict[str, Any], safe: bool) -> None:
    import torch

    if not state:
        raise MergeError(f"{folder}: the checkpoint holds no weights")
    if safe:
        others = [key for key, value in state.items() if not isinstance(value, torch.Tensor)]
        if others:
            raise MergeError(
                f"{folder}: entry {others[0]!r} ({type(state[others[0]]).__name__}) is not a tensor, "
                "which safetensors cannot store; pass --unsafe_serialization for pytorch_model.bin"
            )
