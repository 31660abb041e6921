"""Tensor parallel plans in transformers' format, resolved against a model and applied over `tp`.

A plan maps module-name patterns to a style name. `*` in a pattern stands for one name in the
module path (`layers.*.mlp.up_proj`). The plan comes from `TorchTensorParallelConfig(tp_plan=...)`,
else from the model (`tp_plan`, `_tp_plan`, then its config's `base_model_tp_plan` under the base
model's prefix, as transformers lays them out). A pattern that matches no module, or a style this
module does not know, is one error naming it. Parameters tied before (an embedding and its output
head) are tied again after their modules were split.

A module split column-wise gives each rank some of its outputs: code after it must not assume the
full width (an attention's `view(batch, seq, -1, head_dim)` works, `view(..., n_heads, ...)` does not).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from accel_state.parallelism.config import ParallelismConfigError


def _styles() -> dict[str, Callable[[], Any]]:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    gathered = lambda: ColwiseParallel(output_layouts=Replicate())  # noqa: E731
    scattered = lambda: RowwiseParallel(input_layouts=Replicate())  # noqa: E731
    return {
        "colwise": ColwiseParallel,
        "rowwise": RowwiseParallel,
        "colwise_rep": gathered,
        "rowwise_rep": scattered,
        # transformers' names for the same splits of an output head and of an embedding's rows.
        "colwise_gather_output": gathered,
        "embedding_rowwise": scattered,
        "sequence_parallel": SequenceParallel,
    }


STYLE_NAMES = (
    "colwise",
    "rowwise",
    "colwise_rep",
    "rowwise_rep",
    "colwise_gather_output",
    "embedding_rowwise",
    "sequence_parallel",
)


def plan_of(model: torch.nn.Module, given: Mapping[str, str] | None) -> tuple[dict[str, str], str]:
    """Return the plan to apply to `model` and where it came from (for messages)."""
    if given is not None:
        return dict(given), "TorchTensorParallelConfig(tp_plan=...)"
    for attribute in ("tp_plan", "_tp_plan"):
        plan = getattr(model, attribute, None)
        if isinstance(plan, Mapping) and plan:
            return dict(plan), f"{type(model).__name__}.{attribute}"
    config = getattr(model, "config", None)
    plan = getattr(config, "base_model_tp_plan", None)
    if isinstance(plan, Mapping) and plan:
        prefix = getattr(model, "base_model_prefix", "") or ""
        if prefix and not isinstance(getattr(model, prefix, None), torch.nn.Module):
            prefix = ""
        return {(f"{prefix}.{k}" if prefix else k): v for k, v in plan.items()}, (
            f"{type(model).__name__}.config.base_model_tp_plan"
        )
    raise ParallelismConfigError(
        f"tp_size > 1 but {type(model).__name__} has no tensor parallel plan (tp_plan, _tp_plan or "
        "config.base_model_tp_plan): pass one as ParallelismConfig(tp_handler=TorchTensorParallelConfig("
        "tp_plan={'layers.*.mlp.up': 'colwise', ...}))"
    )


def resolve(model: torch.nn.Module, plan: Mapping[str, str], source: str) -> dict[str, str]:
    """Return {module name: style} for every module a pattern of `plan` matches (checked)."""
    names = [name for name, _ in model.named_modules() if name]
    resolved: dict[str, str] = {}
    for pattern, style in plan.items():
        if style not in STYLE_NAMES:
            raise ParallelismConfigError(
                f"{source}: style {style!r} of {pattern!r} is not one accel applies "
                f"(known: {', '.join(STYLE_NAMES)})"
            )
        expression = re.compile(re.escape(pattern).replace(r"\*", r"[^.]+"))
        matched = [name for name in names if expression.fullmatch(name)]
        if not matched:
            raise ParallelismConfigError(
                f"{source}: pattern {pattern!r} matches no module of {type(model).__name__}"
            )
        for name in matched:
            resolved[name] = style
    return resolved


def apply_tensor_parallel(model: torch.nn.Module, tp_mesh: Any, plan: Mapping[str, str]) -> None:
    """Split the modules of `plan` ({module name: style}) over `tp_mesh`, in place; re-tie tied weights."""
    from torch.distributed.tensor.parallel import parallelize_module

    styles = _styles()
    tied = _tied_parameters(model)
    parallelize_module(model, tp_mesh, {name: styles[style]() for name, style in plan.items()})
    _retie(model, tied)


def _tied_parameters(model: torch.nn.Module) -> list[list[tuple[str, str]]]:
    """Return the groups of (module name, attribute) that hold one parameter object."""
    holders: dict[int, list[tuple[str, str]]] = {}
    for module_name, module in model.named_modules():
        for attribute, parameter in module.named_parameters(recurse=False):
            holders.setdefault(id(parameter), []).append((module_name, attribute))
    return [group for group in holders.values() if len(group) > 1]


def _retie(model: torch.nn.Module, groups: list[list[tuple[str, str]]]) -> None:
    from torch.distributed.tensor import DTensor

    for group in groups:
        current = [getattr(model.get_submodule(m), a) for m, a in group]
        split = [p for p in current if isinstance(p, DTensor)]
        if not split or all(p is current[0] for p in current):
            continue
        for (module_name, attribute), parameter in zip(group, current, strict=True):
            if parameter is not split[0]:
                setattr(model.get_submodule(module_name), attribute, split[0])
