"""Which submodules FSDP2 shards on their own (the auto-wrap policy), and sharding a model with it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from accel_state.backends.fsdp.plugin import (
    NO_WRAP,
    SIZE_BASED_WRAP,
    TRANSFORMER_BASED_WRAP,
    FsdpConfigError,
    FullyShardedDataParallelPlugin,
)


def wrap_predicate(
    model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin
) -> Callable[[torch.nn.Module], bool]:
    """Return the test that says whether a submodule of `model` is sharded as its own group."""
    policy = plugin.auto_wrap_policy
    if policy == NO_WRAP:
        return lambda module: False
    if policy == SIZE_BASED_WRAP:
        threshold = int(plugin.min_num_params or 0)
        return lambda module: sum(p.numel() for p in module.parameters()) > threshold
    if policy == TRANSFORMER_BASED_WRAP:
        names = set(plugin.transformer_cls_names_to_wrap or ())
        present = {type(module).__name__ for module in model.modules()}
        missing = sorted(names - present)
        if missing:
            raise FsdpConfigError(
                f"transformer_cls_names_to_wrap: {', '.join(missing)} is not the class of any submodule "
                f"of {type(model).__name__}"
            )
        return lambda module: type(module).__name__ in names
    assert callable(policy)
    return _callable_policy(policy)


def _callable_policy(policy: Callable[..., Any]) -> Callable[[torch.nn.Module], bool]:
    """A user's policy: `policy(module) -> bool`, or FSDP1's `policy(module, recurse, nonwrapped_numel)`."""
    parameters: Mapping[str, Any]
    try:
        parameters = inspect.signature(policy).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "recurse" in parameters:

        def fsdp1_style(module: torch.nn.Module) -> bool:
            numel = sum(p.numel() for p in module.parameters())
            return bool(policy(module=module, recurse=False, nonwrapped_numel=numel))

        return fsdp1_style
    return lambda module: bool(policy(module))


def modules_to_shard(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[torch.nn.Module]:
    """Return the submodules (not the root) the policy names, children before their parents.

    Containers without a forward (ModuleList, ModuleDict) are never sharded on their own: FSDP
    gathers parameters around a forward call.
    """
    wraps = wrap_predicate(model, plugin)
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
    return [
        module
        for module in reversed(list(model.modules()))
        if module is not model and not isinstance(module, containers) and wraps(module)
    ]


def apply_activation_checkpointing(modules: list[torch.nn.Module]) -> None:
    """Recompute each module's activations in backward instead of keeping them (its class is unchanged)."""
    from torch.distributed._composable import checkpoint

    for module in modules:
        checkpoint(module)
