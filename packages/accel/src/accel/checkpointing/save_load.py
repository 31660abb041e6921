"""How `save_state`/`load_state` write and restore a checkpoint (see `layout` for its files).

The facade owns one `CheckpointRegistry` (custom objects, pre-hooks) and forwards to these
functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.checkpointing.errors import CheckpointError, raise_any_failure
from accel.checkpointing.fit import LAYOUT_KEY, parameter_layout
from accel.checkpointing.folder import (
    abandon_folder,
    agree_on_folder,
    begin_folder,
    commit_folder,
    lock_for_reading,
)
from accel.checkpointing.layout import TRAINING_STATE_NAME, suffix, write_model
from accel.checkpointing.naming import CHECKPOINT_FOLDER, load_dir, project_configuration, prune, save_dir
from accel.checkpointing.reader import FolderReader
from accel.checkpointing.registry import CheckpointRegistry, registry_of
from accel.checkpointing.restore import (
    check_fits,
    check_resumable_loaders,
    expect_count,
    files_to_read,
    restore_plan,
)
from accel.checkpointing.rng import portable_rng_states, rng_file, rng_file_name
from accel.checkpointing.writer import FolderWriter
from accel_launch.checkpoints.progress import Progress
from accel_state import PartialState, PreparedObjects, barrier, gather_object
from accel_state.process_group.timeouts import named_collective


def save_state(
    accelerator: Any, output_dir: str | Path | None = None, safe_serialization: bool = True
) -> str:
    """Write everything needed to resume training into `output_dir` (atomically); return the folder.

    Collective: every process must call it. With automatic checkpoint naming, `output_dir=None`
    means the next `checkpoint_<n>` under the project folder, and older ones beyond `total_limit`
    are deleted once the new one is in place (never this one; see `naming.prune`). Only a
    checkpoint replaces a checkpoint: a folder holding anything else is refused (see
    `accel.checkpointing.target`). Every rank must pass the same folder (checked before anything is
    written).
    """
    state = PartialState()
    registry = registry_of(accelerator)
    final_dir = save_dir(accelerator, output_dir)
    pending = begin_folder(final_dir)
    temporary = pending.temporary
    progress = Progress("save_state", None, shown=state.is_main_process)
    writer = FolderWriter(temporary, progress)
    counts: dict[str, Any] = {}
    failure: Exception | None = None
    try:
        # The backend writes what it saves in its own format; the rest is written here.
        prepared = accelerator.backend.save_checkpoint(accelerator.prepared, temporary)
        models = list(prepared.models)
        weights = [accelerator.get_state_dict(model) for model in models]
        for hook in registry.save_hooks.values():
            hook(models, weights, str(temporary))
        if state.is_main_process:
            counts = _write_main_files(accelerator, prepared, registry, writer, weights, safe_serialization)
        tensors, metadata = rng_file(portable_rng_states(prepared.data_loaders))
        writer.write_safetensors(rng_file_name(state.process_index), tensors, metadata)
    except Exception as error:  # noqa: BLE001 - every rank learns of it in commit_folder
        failure = error
    except BaseException:
        writer.settle()  # no write of this save goes on into the folder removed next
        abandon_folder(pending)
        progress.close()
        raise
    try:
        commit_folder(pending, writer, state.num_processes, counts, failure)
    finally:
        progress.close()
    config = project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        if state.is_main_process:
            prune(config, final_dir)
        config.iteration += 1
    return str(final_dir)


def _write_main_files(
    accelerator: Any,
    prepared: PreparedObjects,
    registry: CheckpointRegistry,
    writer: FolderWriter,
    weights: list[dict],
    safe: bool,
) -> dict[str, Any]:
    def host(state: Any) -> Any:
        return accelerator.backend.to_host(state)  # the backend's device tensors, on the host

    model_files = [write_model(writer, i, host(state), safe) for i, state in enumerate(weights)]
    for i, optimizer in enumerate(prepared.optimizers):
        writer.write_torch(f"optimizer{suffix(i)}.bin", host(optimizer.state_dict()))
    for i, scheduler in enumerate(prepared.schedulers):
        writer.write_torch(f"scheduler{suffix(i)}.bin", host(scheduler.state_dict()))
    scaler = accelerator.precision.scaler
    if scaler is not None:
        writer.write_torch("scaler.pt", host(scaler.state_dict()))
    for i, obj in enumerate(registry.custom_objects):
        writer.write_torch(f"custom_checkpoint_{i}.pt", host(obj.state_dict()))
    loaders = [_loader_state(loader) for loader in prepared.data_loaders]
    try:
        writer.write_json(TRAINING_STATE_NAME, {"step": int(accelerator.step), "dataloaders": loaders})
    except TypeError as error:
        raise CheckpointError(
            f"save_state: a data loader's state_dict() is not JSON data: {error}"
        ) from error
    return {
        # Whose files these are: an engine's own (DeepSpeed's) only its backend can read.
        "checkpoint_format": accelerator.backend.checkpoint_format,
        "distributed_type": PartialState().distributed_type.value,
        "model_files": model_files,
        "num_optimizers": len(prepared.optimizers),
        LAYOUT_KEY: [parameter_layout(optimizer) for optimizer in prepared.optimizers],
        "num_schedulers": len(prepared.schedulers),
        "num_custom_objects": len(registry.custom_objects),
        "num_dataloaders": len(loaders),
    }


def load_state(
    accelerator: Any, input_dir: str | Path | None = None, restore_dataloader_position: bool = False
) -> str:
    """Restore what `save_state` wrote into the prepared objects; return the folder loaded.

    Each data loader gets its saved epoch back; the batches already seen in that epoch are skipped
    by the caller (`skip_first_batches`), unless `restore_dataloader_position` hands the whole
    saved position to loaders that resume by themselves. Every file is read and checked, on every
    rank, before any object is changed: a checkpoint that fails a check changes nothing.
    """
    state = PartialState()
    if restore_dataloader_position:
        check_resumable_loaders(accelerator.prepared.data_loaders)
    folder = load_dir(accelerator, input_dir)
    agree_on_folder("load_state", folder)
    # The main process holds the folder's lock until every rank has read it: no save replaces it meanwhile.
    lock = lock_for_reading(folder) if state.is_main_process else None
    try:
        with named_collective("load_state (waiting for the main process to check the folder)"):
            barrier()
        _load_folder(accelerator, folder, restore_dataloader_position)
        with named_collective("load_state (waiting for every rank to finish reading)"):
            barrier()  # nobody replaces this folder while another rank still reads it
    finally:
        if lock is not None:
            lock.release()
    config = project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        match = CHECKPOINT_FOLDER.fullmatch(folder.name)
        if match:
            config.iteration = int(match.group(1)) + 1
    return str(folder)


def _load_folder(accelerator: Any, folder: Path, resume_position: bool) -> None:
    state = PartialState()
    registry = registry_of(accelerator)
    reader = FolderReader(folder)
    total = sum(int(entry["size"]) for entry in reader.files.values())
    reader.progress = Progress("load_state", total, shown=state.is_main_process)
    try:
        _restore_from(accelerator, reader, registry, resume_position)
    finally:
        reader.progress.close()


def _restore_from(
    accelerator: Any, reader: FolderReader, registry: CheckpointRegistry, resume_position: bool
) -> None:
    state = PartialState()
    folder = reader.folder
    meta = reader.metadata
    if meta.get("num_processes") != state.num_processes and not accelerator.backend.reshards_checkpoints:
        raise CheckpointError(
            f"{reader.metadata_path} was written by {meta.get('num_processes')} process(es); this job has "
            f"{state.num_processes}: every rank's random states would not match a rank (only a sharded "
            "FSDP checkpoint, SHARDED_STATE_DICT, loads into another number of processes)"
        )
    saved_format = meta.get("checkpoint_format", "torch")
    if saved_format != accelerator.backend.checkpoint_format:
        raise CheckpointError(
            f"{reader.metadata_path} was written by a {meta.get('distributed_type', '?')} run and this "
            f"run is {state.distributed_type.value}: its model and optimizer files are in "
            f"{saved_format}'s format; load it with the backend that saved it"
        )
    values = _read_every_rank(accelerator, reader, state.process_index, state.is_main_process)
    prepared = accelerator.backend.load_checkpoint(accelerator.prepared, folder)
    models = list(prepared.models)
    for hook in registry.load_hooks.values():
        hook(models, str(folder))
    expect_count(reader, "model", len(meta.get("model_files", [])), len(models))
    expect_count(reader, "optimizer", meta.get("num_optimizers"), len(prepared.optimizers))
    expect_count(reader, "scheduler", meta.get("num_schedulers"), len(prepared.schedulers))
    expect_count(reader, "custom object", meta.get("num_custom_objects"), len(registry.custom_objects))
    expect_count(reader, "data loader", meta.get("num_dataloaders"), len(prepared.data_loaders))
    restores = restore_plan(
        accelerator, prepared, models, registry, reader, state.process_index, resume_position
    )
    decoded = []
    for name, decode, restore in restores:
        try:
            decoded.append((restore, decode(values[name])))
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise CheckpointError(f"{folder / name} cannot be restored: {error}") from error
    for restore, value in decoded:
        restore(value)


def _read_every_rank(accelerator: Any, reader: FolderReader, rank: int, is_main: bool) -> dict[str, Any]:
    """Return what the files this rank restores hold, once every rank checked its files, and that
    they fit the prepared objects (collective).

    The main process also checks, by their sha256, the files it does not read (a hook's or a
    backend's); each rank checks its own random states. A failed check on any rank is raised on all.
    """
    names = files_to_read(reader.metadata, reader, rank)
    others = [n for n, e in reader.files.items() if is_main and n not in names and "sha256" in e]
    failure: CheckpointError | None = None
    values: dict[str, Any] = {}
    try:
        values = reader.read_checked(names, others)
        check_fits(accelerator, reader, values)
    except CheckpointError as error:
        failure = error
    message = None if failure is None else str(failure)
    with named_collective("load_state (waiting for every rank to check its files)"):
        messages = gather_object([message])
    raise_any_failure(failure, messages, "load_state")
    return values


def _loader_state(loader: Any) -> dict[str, Any]:
    if callable(getattr(loader, "state_dict", None)):
        return dict(loader.state_dict())
    return {"epoch": int(getattr(loader, "epoch", 0))}
