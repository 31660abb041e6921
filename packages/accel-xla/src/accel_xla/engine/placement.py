"""Moves a model to the XLA device the way training needs it: shared weights still shared, and
optimizers built on the host copies stepping the moved parameters.

`module.to(xla_device)` gives every parameter a new `Parameter` object (an XLA tensor cannot
take a CPU tensor's place in the same object), so a weight two modules share (a decoder tied to
its embedding) becomes two weights, and an optimizer built before the move keeps stepping the
host copies: the two classic TPU mistakes. `move_model` re-ties the shared ones and returns which
parameter became which, and `rebind_optimizer` points an optimizer at the moved ones.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class MovedParameters:
    """Which host parameter each moved parameter replaced (by identity; the hosts are not kept alive)."""

    _moved: dict[int, tuple[weakref.ref, torch.nn.Parameter]] = field(default_factory=dict)

    def record(self, old: torch.nn.Parameter, new: torch.nn.Parameter) -> None:
        if old is not new:
            self._moved[id(old)] = (weakref.ref(old), new)

    def replacement(self, param: torch.Tensor) -> torch.Tensor:
        """Return the moved parameter that replaced `param`, or `param` itself."""
        entry = self._moved.get(id(param))
        if entry is None or entry[0]() is not param:
            return param
        return entry[1]


def _holders(model: torch.nn.Module) -> dict[int, list[tuple[torch.nn.Module, str]]]:
    """Return, for each parameter object, every (module, attribute name) that holds it."""
    holders: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False, remove_duplicate=False):
            holders.setdefault(id(param), []).append((module, name))
    return holders


def _parameters_by_id(model: torch.nn.Module) -> dict[int, torch.nn.Parameter]:
    return {id(p): p for p in model.parameters()}


def move_model(model: torch.nn.Module, device: torch.device, moved: MovedParameters) -> torch.nn.Module:
    """Move `model` to `device`, re-tie the parameters it shared, and record the replacements."""
    before = _parameters_by_id(model)
    holders = _holders(model)
    model.to(device)
    for old_id, places in holders.items():
        first_module, first_name = places[0]
        new = first_module.get_parameter(first_name)
        for module, name in places[1:]:
            if module.get_parameter(name) is not new:
                setattr(module, name, new)  # tied again: one tensor, one gradient, one update
        moved.record(before[old_id], new)
    return model


def rebind_optimizer(optimizer: torch.optim.Optimizer, moved: MovedParameters) -> None:
    """Point `optimizer`'s parameter groups (and any state it holds) at the moved parameters."""
    for group in optimizer.param_groups:
        group["params"] = [moved.replacement(p) for p in group["params"]]
    state = optimizer.state
    for old in list(state):
        new = moved.replacement(old)
        if new is not old:
            state[new] = {
                key: value.to(new.device) if isinstance(value, torch.Tensor) and value.dim() > 0 else value
                for key, value in state.pop(old).items()
            }


def parameters_of(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]
