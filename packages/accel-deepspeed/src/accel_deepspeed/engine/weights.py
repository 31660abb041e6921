"""Full (consolidated) weights of a DeepSpeed engine's model, at any ZeRO stage.

Under ZeRO each rank holds a slice of the fp32 master weights (and at stage 3 of the model's own
parameters too); these functions gather or scatter whole tensors. Every rank must call them.
"""

from __future__ import annotations

from typing import Any

import torch


def consolidated_state_dict(module: torch.nn.Module, sixteen_bit: bool = False) -> dict[str, torch.Tensor]:
    """Return `module`'s full state dict: the fp32 master weights where the optimizer keeps them
    (or, with `sixteen_bit`, the weights the model computes with), buffers as they are."""
    from deepspeed.utils import safe_get_full_fp32_param

    parameters = {id(p): p for p in module.parameters()}
    result: dict[str, torch.Tensor] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        parameter = parameters.get(id(tensor))
        if parameter is None:
            result[name] = tensor.detach().clone()
            continue
        value = None if sixteen_bit else safe_get_full_fp32_param(parameter)
        if value is None:
            value = _gathered(parameter)
        result[name] = value.detach().clone()
    return result


def _gathered(parameter: torch.nn.Parameter) -> torch.Tensor:
    if not hasattr(parameter, "ds_id"):  # not partitioned (ZeRO 0-2)
        return parameter.detach()
    import deepspeed

    with deepspeed.zero.GatheredParameters([parameter], modifier_rank=None):
        return parameter.detach().clone()


def load_full_state_dict(module: torch.nn.Module, state_dict: dict[str, Any]) -> None:
    """Load a full state dict (as `consolidated_state_dict` returns it) into `module` and into the
    optimizer's fp32 master weights. Raises KeyError naming a missing or unexpected key."""
    import deepspeed
    from deepspeed.utils import safe_set_full_fp32_param

    own = module.state_dict(keep_vars=True)
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise KeyError(f"state dict does not fit the model: missing {missing}, unexpected {unexpected}")
    parameters = {id(p): p for p in module.parameters()}
    for name, tensor in own.items():
        value = state_dict[name]
        parameter = parameters.get(id(tensor))
        if parameter is None:
            with torch.no_grad():
                tensor.copy_(value)
            continue
        if hasattr(parameter, "ds_id"):
            with deepspeed.zero.GatheredParameters([parameter], modifier_rank=0), torch.no_grad():
                parameter.copy_(value)
        else:
            with torch.no_grad():
                parameter.copy_(value)
        safe_set_full_fp32_param(parameter, value.to(torch.float32))
