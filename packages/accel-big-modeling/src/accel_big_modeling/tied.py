"""Tied parameters: one tensor reachable under several names (an embedding shared with the LM head)."""

from __future__ import annotations

import torch
from torch import nn


def find_tied_parameters(model: nn.Module) -> list[list[str]]:
    """Return the groups of parameter names that share one tensor, each group sorted, as Accelerate does."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [sorted(set(names)) for names in groups.values() if len(set(names)) > 1]


def get_submodule_and_name(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    """Return the module owning the tensor `name` and the tensor's attribute name in it."""
    module_name, _, attribute = name.rpartition(".")
    return (model.get_submodule(module_name) if module_name else model), attribute


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Point every name of each group at one parameter again, a materialised one if any."""
    for group in tied_params:
        tensors = [getattr(*get_submodule_and_name(model, name)) for name in group]
        # Prefer a materialised tensor; tying meta tensors still keeps the group visible to later steps.
        source = next((t for t in tensors if t.device != torch.device("meta")), tensors[0])
        for name in group:
            owner, attribute = get_submodule_and_name(model, name)
            setattr(owner, attribute, source)
