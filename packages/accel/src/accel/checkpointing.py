"""What a checkpoint holds, and how `save_state`/`load_state` write and restore it.

The facade owns one `CheckpointRegistry` (custom objects, pre-hooks) and forwards to these
functions. Files of a checkpoint folder (Accelerate's names where it has them):

    model.safetensors, model_<i>.safetensors   (pytorch_model[_<i>].bin with safe_serialization=False)
    optimizer[_<i>].bin, scheduler[_<i>].bin, scaler.pt, custom_checkpoint_<i>.pt
    training_state.json                         step counter and each data loader's position
    random_states_<rank>.pt                     one per rank, written by that rank
    checkpoint.json                             format, process count, every file's size and checksum
"""

from __future__ import annotations

import collections
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.hooks import RemovableHandle

from accel.checkpoint_io import (
    CheckpointError,
    FolderReader,
    FolderWriter,
    begin_folder,
    commit_folder,
    recover_folder,
)
from accel.project_config import ProjectConfiguration
from accel.weight_files import flat_tensors, with_aliases
from accel_state import PartialState, barrier, get_rng_states, set_rng_states
from accel_state.timeouts import named_collective

TRAINING_STATE_NAME = "training_state.json"
_CHECKPOINT_FOLDER = re.compile(r"checkpoint_(\d+)")
SaveHook = Callable[[list[torch.nn.Module], list[dict[str, torch.Tensor]], str], None]
LoadHook = Callable[[list[torch.nn.Module], str], None]


class CheckpointRegistry:
    """Custom objects saved with every checkpoint, and the save/load pre-hooks (one per Accelerator)."""

    def __init__(self) -> None:
        self.custom_objects: list[Any] = []
        self.save_hooks: collections.OrderedDict[int, SaveHook] = collections.OrderedDict()
        self.load_hooks: collections.OrderedDict[int, LoadHook] = collections.OrderedDict()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Add objects with `state_dict`/`load_state_dict` to every save_state/load_state."""
        invalid = [
            f"- item at index {i}, `{type(obj).__name__}`"
            for i, obj in enumerate(objects)
            if not (
                callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))
            )
        ]
        if invalid:
            raise ValueError(
                "register_for_checkpointing: every object needs `state_dict` and `load_state_dict` "
                "methods; these do not:\n" + "\n".join(invalid)
            )
        self.custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Call `hook(models, weights, output_dir)` before save_state writes the models.

        The hook may write files into `output_dir` (they become part of the checkpoint) and pop
        entries from `weights` to keep save_state from writing those models itself.
        """
        handle = RemovableHandle(self.save_hooks)
        self.save_hooks[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Call `hook(models, input_dir)` before load_state loads the models; it may pop models it loaded."""
        handle = RemovableHandle(self.load_hooks)
        self.load_hooks[handle.id] = hook
        return handle


def registry_of(accelerator: Any) -> CheckpointRegistry:
    """Return the accelerator's registry, creating it on first use."""
    registry = getattr(accelerator, "_checkpoint_registry", None)
    if registry is None:
        registry = accelerator._checkpoint_registry = CheckpointRegistry()
    return registry


def _project_configuration(accelerator: Any) -> ProjectConfiguration | None:
    return getattr(accelerator, "project_configuration", None)


def _suffix(index: int) -> str:
    return "" if index == 0 else f"_{index}"


# Naming and retention --------------------------------------------------------------------------------
def list_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """Return the `checkpoint_<n>` folders under `checkpoints_dir`, oldest (smallest n) first."""
    folder = Path(checkpoints_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CHECKPOINT_FOLDER.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def _save_dir(accelerator: Any, output_dir: str | Path | None) -> Path:
    config = _project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        if output_dir is not None:
            config.set_directories(output_dir)
        folder = config.checkpoints_dir / f"checkpoint_{config.iteration}"
        if folder.exists():
            raise ValueError(
                f"save_state: checkpoint folder {folder} already exists; load_state() the newest "
                "checkpoint first (which sets project_configuration.iteration) or set iteration yourself"
            )
        return folder
    if output_dir is None:
        raise ValueError(
            "save_state: pass output_dir, or use ProjectConfiguration(automatic_checkpoint_naming=True)"
        )
    return Path(output_dir)


def _load_dir(accelerator: Any, input_dir: str | Path | None) -> Path:
    if input_dir is not None:
        return Path(input_dir)
    config = _project_configuration(accelerator)
    if config is None or not config.automatic_checkpoint_naming:
        raise ValueError(
            "load_state: pass input_dir, or use ProjectConfiguration(automatic_checkpoint_naming=True)"
        )
    found = list_checkpoints(config.checkpoints_dir)
    if not found:
        raise CheckpointError(f"load_state: no checkpoint_<n> folder under {config.checkpoints_dir}")
    return found[-1]


def _prune(config: ProjectConfiguration) -> None:
    if config.total_limit is None:
        return
    found = list_checkpoints(config.checkpoints_dir)
    for old in found[: max(0, len(found) - config.total_limit)]:
        shutil.rmtree(old, ignore_errors=True)


# Random states as plain data (loadable with weights_only=True) -----------------------------------------
def _portable_rng_states(accelerator: Any) -> dict[str, Any]:
    states = get_rng_states()
    version, internal, gauss = states["python"]
    name, keys, position, has_gauss, cached = states["numpy"]
    portable: dict[str, Any] = {  # long integer lists as tensors: they load far faster
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [
            str(name), torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)
        ],
        "torch": states["torch"],
        "generators": [
            gen.get_state() if (gen := getattr(loader, "synchronized_generator", None)) is not None else None
            for loader in accelerator._dataloaders
        ],
    }
    if "cuda" in states:
        portable["cuda"] = list(states["cuda"])
    return portable


def _integers(values: torch.Tensor | list[int]) -> list[int]:
    """Return a list of ints from a tensor (this format) or a list (checkpoints from accel 0.1)."""
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def _restore_rng_states(accelerator: Any, portable: dict[str, Any]) -> None:
    version, internal, gauss = portable["python"]
    name, keys, position, has_gauss, cached = portable["numpy"]
    states: dict[str, Any] = {
        "python": (version, tuple(_integers(internal)), gauss),
        "numpy": (name, np.asarray(_integers(keys), dtype=np.uint32), position, has_gauss, cached),
        "torch": portable["torch"],
    }
    if "cuda" in portable:
        states["cuda"] = portable["cuda"]
    set_rng_states(states)
    for loader, state in zip(accelerator._dataloaders, portable.get("generators", []), strict=False):
        generator = getattr(loader, "synchronized_generator", None)
        if generator is not None and state is not None:
            generator.set_state(state)


# Model weights ----------------------------------------------------------------------------------------
def _write_model(writer: FolderWriter, index: int, state: dict[str, torch.Tensor], safe: bool) -> str:
    if safe:
        name = f"model{_suffix(index)}.safetensors"
        tensors, aliases = flat_tensors(state)
        writer.write_safetensors(name, tensors, {"format": "pt", "accel_aliases": json.dumps(aliases)})
    else:
        name = f"pytorch_model{_suffix(index)}.bin"
        writer.write_torch(name, state)
    return name


def _model_weights(name: str, loaded: Any) -> dict[str, torch.Tensor]:
    """Return the state dict in what FolderReader gave for model file `name`."""
    if name.endswith(".safetensors"):
        tensors, metadata = loaded
        return with_aliases(tensors, metadata)
    return loaded


# Data loaders -----------------------------------------------------------------------------------------
def _loader_state(loader: Any) -> dict[str, Any]:
    if callable(getattr(loader, "state_dict", None)):
        return dict(loader.state_dict())
    return {"epoch": int(getattr(loader, "epoch", 0))}


def _restore_loader(loader: Any, state: dict[str, Any], resume_position: bool) -> None:
    if resume_position:
        loader.load_state_dict(state)  # _check_resumable_loaders made sure it can
    elif "epoch" in state and callable(getattr(loader, "set_epoch", None)):
        # Only the epoch: the caller skips the batches already seen (skip_first_batches), and two
        # mechanisms that both skip would skip twice.
        loader.set_epoch(state["epoch"])


def _check_resumable_loaders(loaders: list[Any]) -> None:
    """Refuse restore_dataloader_position before anything is loaded, not after half of it was."""
    for loader in loaders:
        if not callable(getattr(loader, "load_state_dict", None)):
            raise ValueError(
                f"load_state(restore_dataloader_position=True): {type(loader).__name__} has no "
                "load_state_dict; resume with set_epoch and skip_first_batches instead"
            )


# save_state / load_state -------------------------------------------------------------------------------
def save_state(
    accelerator: Any, output_dir: str | Path | None = None, safe_serialization: bool = True
) -> str:
    """Write everything needed to resume training into `output_dir` (atomically); return the folder.

    Collective: every process must call it. With automatic checkpoint naming, `output_dir=None`
    means the next `checkpoint_<n>` under the project folder, and older ones beyond `total_limit`
    are deleted once the new one is in place.
    """
    state = PartialState()
    registry = registry_of(accelerator)
    final_dir = _save_dir(accelerator, output_dir)
    temporary = begin_folder(final_dir)
    writer = FolderWriter(temporary)
    try:
        models = list(accelerator._models)
        weights = [accelerator.get_state_dict(model) for model in models]
        for hook in registry.save_hooks.values():
            hook(models, weights, str(temporary))
        counts: dict[str, Any] = {}
        if state.is_main_process:
            counts = _write_main_files(accelerator, registry, writer, weights, safe_serialization)
        writer.write_torch(f"random_states_{state.process_index}.pt", _portable_rng_states(accelerator))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    commit_folder(temporary, final_dir, writer, state.num_processes, counts)
    config = _project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        if state.is_main_process:
            _prune(config)
        config.iteration += 1
    return str(final_dir)


def _write_main_files(
    accelerator: Any, registry: CheckpointRegistry, writer: FolderWriter, weights: list[dict], safe: bool
) -> dict[str, Any]:
    model_files = [_write_model(writer, i, state, safe) for i, state in enumerate(weights)]
    for i, optimizer in enumerate(accelerator._optimizers):
        writer.write_torch(f"optimizer{_suffix(i)}.bin", optimizer.state_dict())
    for i, scheduler in enumerate(accelerator._schedulers):
        writer.write_torch(f"scheduler{_suffix(i)}.bin", scheduler.state_dict())
    scaler = accelerator.precision.scaler
    if scaler is not None:
        writer.write_torch("scaler.pt", scaler.state_dict())
    for i, obj in enumerate(registry.custom_objects):
        writer.write_torch(f"custom_checkpoint_{i}.pt", obj.state_dict())
    loaders = [_loader_state(loader) for loader in accelerator._dataloaders]
    try:
        writer.write_json(TRAINING_STATE_NAME, {"step": int(accelerator.step), "dataloaders": loaders})
    except TypeError as error:
        raise CheckpointError(
            f"save_state: a data loader's state_dict() is not JSON data: {error}"
        ) from error
    return {
        "model_files": model_files,
        "num_optimizers": len(accelerator._optimizers),
        "num_schedulers": len(accelerator._schedulers),
        "num_custom_objects": len(registry.custom_objects),
        "num_dataloaders": len(loaders),
    }


def load_state(
    accelerator: Any, input_dir: str | Path | None = None, restore_dataloader_position: bool = False
) -> str:
    """Restore what `save_state` wrote into the prepared objects; return the folder loaded.

    Each data loader gets its saved epoch back; the batches already seen in that epoch are skipped
    by the caller (`skip_first_batches`), unless `restore_dataloader_position` hands the whole
    saved position to loaders that resume by themselves.
    """
    state = PartialState()
    registry = registry_of(accelerator)
    if restore_dataloader_position:
        _check_resumable_loaders(accelerator._dataloaders)
    folder = _load_dir(accelerator, input_dir)
    if state.is_main_process:
        recover_folder(folder)
    with named_collective("load_state (waiting for the main process to check the folder)"):
        barrier()
    reader = FolderReader(folder)
    meta = reader.metadata
    if meta.get("num_processes") != state.num_processes:
        raise CheckpointError(
            f"{reader.metadata_path} was written by {meta.get('num_processes')} process(es); this job has "
            f"{state.num_processes}: every rank's random states would not match a rank"
        )
    models = list(accelerator._models)
    for hook in registry.load_hooks.values():
        hook(models, str(folder))
    _expect_count(reader, "model", len(meta.get("model_files", [])), len(models))
    _expect_count(reader, "optimizer", meta.get("num_optimizers"), len(accelerator._optimizers))
    _expect_count(reader, "scheduler", meta.get("num_schedulers"), len(accelerator._schedulers))
    _expect_count(reader, "custom object", meta.get("num_custom_objects"), len(registry.custom_objects))
    _expect_count(reader, "data loader", meta.get("num_dataloaders"), len(accelerator._dataloaders))
    rank, resume_position = state.process_index, restore_dataloader_position
    restores = _restores(accelerator, models, registry, reader, rank, resume_position)
    for (_, restore), loaded in zip(restores, reader.read_all([name for name, _ in restores]), strict=True):
        restore(loaded)
    config = _project_configuration(accelerator)
    if config is not None and config.automatic_checkpoint_naming:
        match = _CHECKPOINT_FOLDER.fullmatch(folder.name)
        if match:
            config.iteration = int(match.group(1)) + 1
    with named_collective("load_state (waiting for every rank to finish reading)"):
        barrier()  # nobody replaces this folder while another rank still reads it
    return str(folder)


def _restores(
    accelerator: Any,
    models: list[torch.nn.Module],
    registry: CheckpointRegistry,
    reader: FolderReader,
    rank: int,
    resume_position: bool,
) -> list[tuple[str, Callable[[Any], None]]]:
    """Return, in reading order, each file of the checkpoint and what to do with what it holds.

    `models` are those the load pre-hooks left to load_state.
    """
    restores: list[tuple[str, Callable[[Any], None]]] = []
    for model, name in zip(models, reader.metadata.get("model_files", []), strict=True):
        restores.append((name, lambda loaded, m=model, n=name: accelerator.backend.load_state_dict(
            m, _model_weights(n, loaded))))  # fmt: skip
    for i, optimizer in enumerate(accelerator._optimizers):
        restores.append((f"optimizer{_suffix(i)}.bin", optimizer.load_state_dict))
    for i, scheduler in enumerate(accelerator._schedulers):
        restores.append((f"scheduler{_suffix(i)}.bin", scheduler.load_state_dict))
    scaler = accelerator.precision.scaler
    if scaler is not None and reader.has("scaler.pt"):
        restores.append(("scaler.pt", scaler.load_state_dict))
    for i, obj in enumerate(registry.custom_objects):
        restores.append((f"custom_checkpoint_{i}.pt", obj.load_state_dict))
    restores.append(
        (TRAINING_STATE_NAME, lambda loaded: _restore_training_state(accelerator, loaded, resume_position))
    )
    restores.append((f"random_states_{rank}.pt", lambda portable: _restore_rng_states(accelerator, portable)))
    return restores


def _restore_training_state(accelerator: Any, training: dict[str, Any], resume_position: bool) -> None:
    accelerator.step = int(training["step"])
    for loader, loader_state in zip(accelerator._dataloaders, training["dataloaders"], strict=True):
        _restore_loader(loader, loader_state, resume_position)


def _expect_count(reader: FolderReader, what: str, saved: int | None, current: int) -> None:
    if saved is not None and saved != current:
        raise CheckpointError(
            f"{reader.metadata_path} holds {saved} {what}(s) but this Accelerator has {current} prepared "
            f"(or registered); prepare the same objects, in the same order, as the run that saved it"
        )
