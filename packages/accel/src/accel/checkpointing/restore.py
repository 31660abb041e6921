"""What load_state restores from each file it read, each value checked before any object changes.

A file whose contents do not fit the prepared objects (sizes, counts, form) fails before anything
is restored: a checkpoint that fails a check changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.fit import LAYOUT_KEY, check_optimizer_fits, check_weights_fit, parameter_names
from accel.checkpointing.layout import TRAINING_STATE_NAME, model_weights, suffix
from accel.checkpointing.owned_memory import into_optimizer_memory, owned
from accel.checkpointing.reader import FolderReader
from accel.checkpointing.registry import CheckpointRegistry
from accel.checkpointing.rng import older_rng_file_name, restore_rng_states, rng_file_name, rng_states
from accel_data.loaders.stateful import STATE_KEY as STATEFUL_LOADER_STATE
from accel_state import PreparedObjects


def _load_model(accelerator: Any, model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    accelerator.backend.load_state_dict(model, weights)


def _load_optimizer(optimizer: Any, saved: dict[str, Any]) -> None:
    optimizer.load_state_dict(into_optimizer_memory(optimizer, saved))


def _fitting_weights(
    accelerator: Any, model: torch.nn.Module, what: str, path: Path, loaded: Any
) -> dict[str, torch.Tensor]:
    """Return the state dict in model file `path` once its keys, shapes and dtypes fit `model`'s."""
    weights = model_weights(path.name, loaded)
    check_weights_fit(path, what, accelerator.backend.unwrap_model(model).state_dict(), weights)
    return weights


def _fitting_optimizer(
    accelerator: Any, optimizer: Any, path: Path, layout: Any, saved: dict[str, Any]
) -> dict[str, Any]:
    """Return the optimizer state dict in `path` once it fits `optimizer` (torch checks it too late)."""

    def names() -> dict[int, str]:
        return parameter_names([accelerator.backend.unwrap_model(m) for m in accelerator.prepared.models])

    check_optimizer_fits(path, optimizer, saved, layout, names)
    return saved


def _layout(reader: FolderReader, index: int) -> Any:
    layouts = reader.metadata.get(LAYOUT_KEY)
    return layouts[index] if isinstance(layouts, list) and index < len(layouts) else None


def check_fits(accelerator: Any, reader: FolderReader, values: dict[str, Any]) -> None:
    """Raise CheckpointError if a model or optimizer file does not fit the prepared object it is
    loaded into, before the backend or a hook loads anything.

    Files and objects pair up by index when their counts agree (no backend or hook keeps some for
    itself); otherwise the same check runs as each file is decoded, before any object changes.
    """
    models, optimizers = accelerator.prepared.models, accelerator.prepared.optimizers
    model_files = reader.metadata.get("model_files") or []
    if len(model_files) == len(models):
        for index, (model, name) in enumerate(zip(models, model_files, strict=True)):
            if name in values:
                _fitting_weights(accelerator, model, f"model {index}", reader.folder / name, values[name])
    if reader.metadata.get("num_optimizers") == len(optimizers):
        for index, optimizer in enumerate(optimizers):
            name = f"optimizer{suffix(index)}.bin"
            if name in values:
                path = reader.folder / name
                _fitting_optimizer(accelerator, optimizer, path, _layout(reader, index), values[name])


def _restore_loader(loader: Any, state: dict[str, Any], resume_position: bool) -> None:
    # A loader on torchdata's StatefulDataLoader resumes by itself after load_state, as Accelerate's.
    resumes_itself = STATEFUL_LOADER_STATE in state and hasattr(loader, "next_iter_state")
    if resume_position or resumes_itself:
        loader.load_state_dict(state)  # check_resumable_loaders made sure it can, or it is stateful
    elif "epoch" in state and callable(getattr(loader, "set_epoch", None)):
        # Only the epoch: the caller skips the batches already seen (skip_first_batches), and two
        # mechanisms that both skip would skip twice.
        loader.set_epoch(state["epoch"])
        restore_shuffle = getattr(loader, "restore_shuffle", None)
        if callable(restore_shuffle):
            restore_shuffle(state)  # that epoch's order, drawn before the restored random states


def check_resumable_loaders(loaders: list[Any]) -> None:
    """Refuse restore_dataloader_position before anything is loaded, not after half of it was."""
    for loader in loaders:
        if not callable(getattr(loader, "load_state_dict", None)):
            raise ValueError(
                f"load_state(restore_dataloader_position=True): {type(loader).__name__} has no "
                "load_state_dict; resume with set_epoch and skip_first_batches instead"
            )


def files_to_read(meta: dict[str, Any], reader: FolderReader, rank: int) -> list[str]:
    """Return the files of the checkpoint that the generic code restores on `rank`, in reading order."""
    names = [str(name) for name in meta.get("model_files", [])]
    names += [f"optimizer{suffix(i)}.bin" for i in range(int(meta.get("num_optimizers") or 0))]
    names += [f"scheduler{suffix(i)}.bin" for i in range(int(meta.get("num_schedulers") or 0))]
    names += ["scaler.pt"] if reader.has("scaler.pt") else []
    names += [f"custom_checkpoint_{i}.pt" for i in range(int(meta.get("num_custom_objects") or 0))]
    # A rank beyond the saving job's (a resharded load) has no random states of its own: it keeps its own.
    random_states = [name for name in [random_states_file(reader, rank)] if name is not None]
    return names + [TRAINING_STATE_NAME, *random_states]


def random_states_file(reader: FolderReader, rank: int) -> str | None:
    """Return the name of `rank`'s random states in the checkpoint (accel 0.1's too); None when the
    saving job had no such rank (a resharded load)."""
    for name in (rng_file_name(rank), older_rng_file_name(rank)):
        if reader.has(name):
            return name
    return None


Restore = tuple[str, Callable[[Any], Any], Callable[[Any], None]]


def restore_plan(
    accelerator: Any,
    prepared: PreparedObjects,
    models: list[torch.nn.Module],
    registry: CheckpointRegistry,
    reader: FolderReader,
    rank: int,
    resume_position: bool,
) -> list[Restore]:
    """Return each file to restore, how to check what it holds, and what to do with that.

    `models` are those the load pre-hooks left to load_state.
    """
    restores: list[Restore] = []
    for i, (model, name) in enumerate(zip(models, reader.metadata.get("model_files", []), strict=True)):
        weights = functools.partial(_fitting_weights, accelerator, model, f"model {i}", reader.folder / name)
        restores.append((name, weights, functools.partial(_load_model, accelerator, model)))
    for i, optimizer in enumerate(prepared.optimizers):
        name = f"optimizer{suffix(i)}.bin"
        fits = functools.partial(
            _fitting_optimizer, accelerator, optimizer, reader.folder / name, _layout(reader, i)
        )
        restores.append((name, fits, functools.partial(_load_optimizer, optimizer)))
    for i, scheduler in enumerate(prepared.schedulers):
        restores.append((f"scheduler{suffix(i)}.bin", owned, scheduler.load_state_dict))
    scaler = accelerator.precision.scaler
    if scaler is not None and reader.has("scaler.pt"):
        restores.append(("scaler.pt", owned, scaler.load_state_dict))
    for i, obj in enumerate(registry.custom_objects):
        restores.append((f"custom_checkpoint_{i}.pt", owned, obj.load_state_dict))
    loaders = prepared.data_loaders

    def restore_training_state(training: dict[str, Any]) -> None:
        _restore_training_state(accelerator, loaders, training, resume_position)

    training = functools.partial(_training_state, len(loaders))
    restores.append((TRAINING_STATE_NAME, training, restore_training_state))
    random_states = random_states_file(reader, rank)
    if random_states is not None:
        rng = functools.partial(restore_rng_states, loaders)
        restores.append((random_states, rng_states, rng))
    return restores


def _training_state(loader_count: int, training: dict[str, Any]) -> dict[str, Any]:
    """Return `training` once its step and data loader positions have the expected form."""
    positions = training["dataloaders"]
    if not isinstance(training["step"], int) or not isinstance(positions, list):
        raise TypeError("its step is not an integer or its data loader positions not a list")
    if len(positions) != loader_count or not all(isinstance(p, dict) for p in positions):
        raise ValueError(f"it holds {len(positions)} data loader positions for {loader_count} data loaders")
    return training


def _restore_training_state(
    accelerator: Any, loaders: list[Any], training: dict[str, Any], resume_position: bool
) -> None:
    accelerator.step = int(training["step"])
    for loader, loader_state in zip(loaders, training["dataloaders"], strict=True):
        _restore_loader(loader, loader_state, resume_position)


def expect_count(reader: FolderReader, what: str, saved: int | None, current: int) -> None:
    if saved is not None and saved != current:
        raise CheckpointError(
            f"{reader.metadata_path} holds {saved} {what}(s) but this Accelerator has {current} prepared "
            f"(or registered); prepare the same objects, in the same order, as the run that saved it"
        )
