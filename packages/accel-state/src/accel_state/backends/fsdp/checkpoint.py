"""FSDP2's state dicts and checkpoint files, through `torch.distributed.checkpoint` (DCP).

Sharded (SHARDED_STATE_DICT): each model and each optimizer is one DCP folder inside the checkpoint,
every rank writing its own shards, nothing gathered. Full (FULL_STATE_DICT): the models go the generic
way (the full state dict, written as safetensors by the main process) and each optimizer's full state
dict is one torch file. Either way the files land in the save's temporary folder, so the atomic
protocol (rename into place, every file's checksum in checkpoint.json) covers them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from accel_state.backends.common import unwrap
from accel_state.backends.fsdp.plugin import FsdpConfigError
from accel_state.seam.prepared_objects import PreparedObjects


def _suffix(index: int) -> str:
    return "" if index == 0 else f"_{index}"


def model_folder(index: int) -> str:
    return f"pytorch_model_fsdp{_suffix(index)}"


def optimizer_folder(index: int) -> str:
    return f"optimizer_fsdp{_suffix(index)}"


def optimizer_file(index: int) -> str:
    return f"optimizer_fsdp{_suffix(index)}.bin"


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def full_model_state(
    model: torch.nn.Module, offload_to_cpu: bool = True, rank0_only: bool = True
) -> dict[str, torch.Tensor]:
    """Return `model`'s full state dict (collective): on the CPU with `offload_to_cpu` (else on
    the model's device), on the main process only with `rank0_only` (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if offload_to_cpu and rank0_only:  # DCP gathers onto the main process's CPU in one pass
        state = get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True))
        return cast(dict[str, torch.Tensor], state)
    gathered = cast(
        dict[str, torch.Tensor], get_model_state_dict(model, options=_options(full_state_dict=True))
    )
    if rank0_only and torch.distributed.get_rank() != 0:
        return {}
    return {k: v.cpu() if offload_to_cpu else v for k, v in gathered.items()}


def load_full_model_state(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a full state dict, held by every rank, into `model`'s shards."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, cast(dict[str, Any], state_dict), options=_options(full_state_dict=True))


def _sharded_models(prepared: PreparedObjects) -> list[torch.nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in prepared.models if isinstance(unwrap(m), FSDPModule)]


def _raw(optimizer: Any) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)


def save(backend: Any, prepared: PreparedObjects, folder: Path, *, sharded: bool) -> None:
    """Write the optimizers (and the models when `sharded`) into `folder` (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    if sharded:
        for i, model in enumerate(_sharded_models(prepared)):
            dcp.save(get_model_state_dict(unwrap(model)), checkpoint_id=folder / model_folder(i))
    for i, optimizer in enumerate(prepared.optimizers):
        model = backend.model_of(optimizer)
        if sharded:
            state = get_optimizer_state_dict(model, _raw(optimizer))
            dcp.save(state, checkpoint_id=folder / optimizer_folder(i))
            continue
        plugin = backend.fsdp_plugin
        # Only the main process writes; optim_state_dict_config says where the others gather it.
        on_main_cpu = plugin.optim_state_dict_offload_to_cpu and plugin.optim_state_dict_rank0_only
        options = _options(full_state_dict=True, cpu_offload=on_main_cpu)
        state = get_optimizer_state_dict(model, _raw(optimizer), options=options)
        if backend.state.process_index == 0:
            with (folder / optimizer_file(i)).open("wb") as handle:
                torch.save(state, handle)


def load(backend: Any, prepared: PreparedObjects, folder: Path, *, sharded: bool) -> None:
    """Restore what `save` wrote (collective); a DCP checkpoint reshards to this job's processes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    names = [model_folder(i) for i in range(len(_sharded_models(prepared)))] if sharded else []
    names += [(optimizer_folder if sharded else optimizer_file)(i) for i in range(len(prepared.optimizers))]
    missing = [name for name in names if not (folder / name).exists()]
    if missing:
        raise FsdpConfigError(
            f"{folder} holds no {', '.join(missing)}: prepare the same models and optimizers as the run "
            "that saved it"
        )
    if sharded:
        for i, model in enumerate(_sharded_models(prepared)):
            inner = unwrap(model)
            state = get_model_state_dict(inner)
            dcp.load(state, checkpoint_id=folder / model_folder(i))
            set_model_state_dict(inner, state)
    for i, optimizer in enumerate(prepared.optimizers):
        model = backend.model_of(optimizer)
        if sharded:
            optimizer_state = get_optimizer_state_dict(model, _raw(optimizer))
            dcp.load(optimizer_state, checkpoint_id=folder / optimizer_folder(i))
            set_optimizer_state_dict(model, _raw(optimizer), optimizer_state)
            continue
        full = torch.load(folder / optimizer_file(i), map_location="cpu", weights_only=True)
        set_optimizer_state_dict(model, _raw(optimizer), full, options=_options(full_state_dict=True))
