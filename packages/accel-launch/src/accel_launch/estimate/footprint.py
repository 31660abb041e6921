"""Count a model's parameters and estimate its memory: to load it in a dtype, and to train it with AdamW.

Training (per parameter, activations not counted: they depend on the batch):
- float32: weights 4 + gradients 4 + AdamW's two moments 8 = 16 bytes of state, and a step
  workspace of 4 (torch's foreach AdamW, the default on GPUs, holds the square roots of all second
  moments at once; the per-tensor CPU path's temporaries end up held by the allocator about as
  much), so a peak of 20 bytes.
- float16 / bfloat16 (mixed precision, as `accel launch --mixed_precision`): the same fp32 state and
  workspace, plus the half-precision copies of the weights autocast computes with: 22 bytes.
- int8 / int4: an inference format; no AdamW estimate.
Sharded FSDP-style over N processes, each process holds 1/N of all of it, plus the largest layer
gathered whole (its weights and its gradients, in the compute dtype) while that layer runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from accel_launch.estimate.errors import EstimateError

# Bytes per element of the weights in each dtype `--dtypes` accepts (Accelerate's names).
DTYPE_BYTES: dict[str, float] = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int4": 0.5}
# Bytes per parameter of a training step with AdamW: (state, step workspace, compute dtype's bytes).
ADAMW_BYTES: dict[str, tuple[int, int, int]] = {
    "float32": (16, 4, 4),
    "float16": (18, 4, 2),
    "bfloat16": (18, 4, 2),
}


@dataclass(frozen=True)
class ModelCount:
    """What the estimates are made of: element counts, independent of any dtype."""

    parameters: int  # unique parameters: a tied matrix counts once
    float_buffer_elements: int  # buffers that follow the weights' dtype (e.g. rotary tables)
    other_buffer_bytes: int  # integer buffers, kept as they are (e.g. position ids)
    largest_layer: str
    largest_layer_elements: int


@dataclass(frozen=True)
class DtypeEstimate:
    """The memory to hold the model in one dtype, and to train it with AdamW in that precision."""

    dtype: str
    total_bytes: int
    largest_layer_bytes: int
    adamw_state_bytes: int | None  # weights + gradients + moments (+ half copies), no workspace
    training_peak_bytes: int | None  # one process holding everything
    training_per_process_bytes: int | None  # FSDP-style over `num_processes`; None when not asked


def check_dtypes(dtypes: list[str]) -> list[str]:
    """Return the dtypes lowercased and without repeats; raise EstimateError naming an unknown one."""
    seen: list[str] = []
    for dtype in dtypes:
        name = dtype.lower().removeprefix("torch.")
        if name not in DTYPE_BYTES:
            raise EstimateError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPE_BYTES)})")
        if name not in seen:
            seen.append(name)
    return seen


def count_model(model: nn.Module) -> ModelCount:
    """Count `model`'s unique parameters and buffers, and find its largest layer.

    A layer is what a device map would not split: a module without children, a module of one of
    the model's `_no_split_modules` classes (transformers models name their blocks there), or a
    parameter held directly by a module that also has children."""
    parameters = sum(p.numel() for p in model.parameters())
    float_buffers = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    other_buffers = sum(b.numel() * b.element_size() for b in model.buffers() if not b.is_floating_point())
    name, elements = largest_layer(model)
    return ModelCount(parameters, float_buffers, other_buffers, name, elements)


def module_elements(module: nn.Module) -> int:
    """Elements of a module's own and descendants' parameters and buffers, each tensor once."""
    return sum(t.numel() for t in module.parameters()) + sum(t.numel() for t in module.buffers())


def largest_layer(model: nn.Module) -> tuple[str, int]:
    """Return the name and element count of the largest layer (see `count_model`)."""
    no_split = set(getattr(model, "_no_split_modules", None) or [])
    best = ("", 0)
    pending: list[tuple[str, nn.Module]] = [("", model)]
    while pending:
        prefix, module = pending.pop()
        children = list(module.named_children())
        if not children or (prefix and type(module).__name__ in no_split):
            size = module_elements(module)
            if size > best[1]:
                best = (prefix or type(module).__name__, size)
            continue
        dot = f"{prefix}." if prefix else ""
        for tensor_name, tensor in [
            *module.named_parameters(recurse=False),
            *module.named_buffers(recurse=False),
        ]:
            if tensor.numel() > best[1]:
                best = (dot + tensor_name, tensor.numel())
        pending.extend((dot + child_name, child) for child_name, child in reversed(children))
    return best


def estimate(count: ModelCount, dtype: str, num_processes: int | None = None) -> DtypeEstimate:
    """Return the load and AdamW training estimates of the counted model in `dtype`."""
    weight_bytes = DTYPE_BYTES[dtype]
    total = (
        math.ceil((count.parameters + count.float_buffer_elements) * weight_bytes) + count.other_buffer_bytes
    )
    largest = math.ceil(count.largest_layer_elements * weight_bytes)
    if dtype not in ADAMW_BYTES:
        return DtypeEstimate(dtype, total, largest, None, None, None)
    state, workspace, compute = ADAMW_BYTES[dtype]
    buffers = count.float_buffer_elements * 4 + count.other_buffer_bytes
    state_bytes = count.parameters * state + buffers
    peak = state_bytes + count.parameters * workspace
    per_process = None
    if num_processes is not None:
        # Weights and gradients of the layer running are gathered whole on every process.
        gathered = count.largest_layer_elements * 2 * compute
        per_process = math.ceil(count.parameters * (state + workspace) / num_processes) + buffers + gathered
    return DtypeEstimate(dtype, total, largest, state_bytes, peak, per_process)
