"""Whether what a checkpoint holds fits the live objects: every key, shape and dtype, checked before
load_state changes any object.

torch's `load_state_dict` copies tensor after tensor and reports a size mismatch only at the end, once
the tensors before it were overwritten; an optimizer's `load_state_dict` does not compare the state
with its parameters at all (the next step fails, or broadcasts). So each model file is compared key
by key with the model it is loaded into, and each optimizer file with the parameters recorded at
save time (`parameter_layout`, in checkpoint.json) and with the optimizer's own state where it has
some. A mismatch is one CheckpointError naming the file, the key and both shapes (or dtypes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.errors import CheckpointError

LAYOUT_KEY = "optimizer_parameters"  # checkpoint.json: per optimizer, [[shape, dtype], ...] of its parameters


def parameter_layout(optimizer: Any) -> list[list[Any]]:
    """Return [shape, dtype] of each parameter of `optimizer`, in the order its state dict numbers them."""
    return [[list(p.shape), str(p.dtype)] for group in optimizer.param_groups for p in group["params"]]


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _some(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check_weights_fit(path: Path, what: str, live: Mapping[str, Any], saved: Mapping[str, Any]) -> None:
    """Raise CheckpointError unless `saved` (model file `path`) has the keys, shapes and dtypes of
    `live`, the state dict of `what` ("model 0")."""
    missing = [key for key in live if key not in saved]
    unexpected = [key for key in saved if key not in live]
    if missing or unexpected:
        parts = [f"{what} has {_some(missing)}, which the checkpoint lacks"] if missing else []
        parts += [f"the checkpoint holds {_some(unexpected)}, which {what} lacks"] if unexpected else []
        raise CheckpointError(
            f"{path} does not fit {what}: {'; '.join(parts)} (load it into the model that saved it)"
        )
    for key, tensor in live.items():
        value = saved[key]
        if not isinstance(tensor, torch.Tensor) or not isinstance(value, torch.Tensor):
            continue
        if _shape(value) != _shape(tensor):
            raise CheckpointError(
                f"{path} does not fit {what}: {key!r} has shape {_shape(value)} in the checkpoint and "
                f"{_shape(tensor)} in the model (load it into a model of the same architecture)"
            )
        if value.dtype != tensor.dtype:
            raise CheckpointError(
                f"{path} does not fit {what}: {key!r} is {value.dtype} in the checkpoint and "
                f"{tensor.dtype} in the model (cast the model as it was when saved before loading)"
            )


def check_optimizer_fits(
    path: Path, optimizer: Any, saved: Any, layout: Any, names: Callable[[], Mapping[int, str]] | None = None
) -> None:
    """Raise CheckpointError unless optimizer file `path` (its state dict `saved`, the parameters'
    recorded `layout` or None) fits `optimizer`: the same parameters, in shape and dtype, and state
    tensors of the shapes the optimizer's own state has (where it has some). `names()` maps
    id(parameter) to its name (asked only for an error). A state dict of another form is left to
    the restore, which names what is wrong with it."""
    if not isinstance(saved, Mapping) or not isinstance(saved.get("param_groups"), list):
        return
    groups, state = saved["param_groups"], saved.get("state")
    try:
        saved_ids = [pid for group in groups for pid in group["params"]]
    except (KeyError, TypeError):
        return
    sizes = [len(group["params"]) for group in groups]
    live_groups = [group["params"] for group in optimizer.param_groups]
    if sizes != [len(params) for params in live_groups]:
        raise CheckpointError(
            f"{path} does not fit the optimizer: it holds parameter groups of sizes {sizes}; the "
            f"optimizer's have {[len(params) for params in live_groups]}"
        )
    params = [p for group in live_groups for p in group]

    def parameter(index: int) -> str:
        name = names().get(id(params[index])) if names is not None else None
        return f"parameter {index}" + (f" ({name!r})" if name else "")

    if isinstance(layout, list) and len(layout) == len(params):
        for index, (param, recorded) in enumerate(zip(params, layout, strict=True)):
            shape, dtype = tuple(recorded[0]), recorded[1]
            if shape != _shape(param):
                raise CheckpointError(
                    f"{path} does not fit the optimizer: {parameter(index)} had shape {shape} when saved "
                    f"and has {_shape(param)} now (load it into the optimizer of the same model)"
                )
            if dtype != str(param.dtype):
                raise CheckpointError(
                    f"{path} does not fit the optimizer: {parameter(index)} was {dtype} when saved and "
                    f"is {param.dtype} now"
                )
    if not isinstance(state, Mapping):
        return
    live_state = optimizer.state
    for index, (pid, param) in enumerate(zip(saved_ids, params, strict=True)):
        entry, live_entry = state.get(pid), live_state.get(param)
        if not isinstance(entry, Mapping) or not isinstance(live_entry, Mapping):
            continue
        for key, value in entry.items():
            live = live_entry.get(key)
            if not isinstance(value, torch.Tensor) or not isinstance(live, torch.Tensor):
                continue
            if _shape(value) != _shape(live):  # dtypes: torch casts the state to the parameter's
                raise CheckpointError(
                    f"{path} does not fit the optimizer: state {key!r} of {parameter(index)} has shape "
                    f"{_shape(value)} in the checkpoint and {_shape(live)} in the optimizer"
                )


def parameter_names(models: list[torch.nn.Module]) -> dict[int, str]:
    """Return {id(parameter): its name} over `models` ("model 1: 0.weight" beyond the first)."""
    names: dict[int, str] = {}
    for index, model in enumerate(models):
        for name, param in model.named_parameters():
            names.setdefault(id(param), name if index == 0 else f"model {index}: {name}")
    return names
