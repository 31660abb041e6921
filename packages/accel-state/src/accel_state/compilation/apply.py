"""Compiling a prepared model in place, the same way whatever wrapped it (DDP, FSDP2, a mesh).

`Module.compile` compiles the module's call in place instead of wrapping it in torch's
OptimizedModule: the object `prepare` returns stays the backend's wrapper (its `no_sync`, its
hooks), and its state dict keeps the eager keys (no `_orig_mod.`), so a compiled model's
checkpoint loads into an eager one and back.
"""

from __future__ import annotations

from typing import Any

import torch

from accel_state.compilation.cache import use_compile_cache
from accel_state.compilation.cpu_inductor import device_type_of, with_cpu_options
from accel_state.compilation.in_place import compile_in_place
from accel_state.compilation.inductor_options import with_mode_options
from accel_state.compilation.plugin import TorchDynamoPlugin
from accel_state.compilation.regions import compile_regions
from accel_state.compilation.vector_isa import check_vector_isa_ahead


def compile_model(model: torch.nn.Module, plugin: TorchDynamoPlugin) -> torch.nn.Module:
    """Compile `model` in place as `plugin` says (whole, or each repeated block); return it."""
    if not plugin.enabled:
        return model
    use_compile_cache()
    kwargs = compile_kwargs(plugin, model)
    if kwargs["backend"] == "inductor" and device_type_of(model) == "cpu":
        check_vector_isa_ahead(kwargs.get("options"))  # overlaps dynamo's trace at the first forward
    if plugin.use_regional_compilation:
        return compile_regions(model, plugin.regional_block_classes, **kwargs)
    return compile_in_place(model, **kwargs)


def compile_kwargs(plugin: TorchDynamoPlugin, model: torch.nn.Module) -> dict[str, Any]:
    """Return torch.compile's keyword arguments for `model` (on the CPU, with accel's CPU options).

    A mode given beside inductor's options adds its own options under them; another backend takes a
    mode or options, not both (`inductor_options`).
    """
    kwargs = plugin.to_kwargs()
    if plugin.options and kwargs["backend"] == "inductor":  # checked by the plugin, at `prepare`
        kwargs["options"] = with_mode_options(plugin.options, plugin.mode, plugin.dynamic)
    return with_cpu_options(kwargs, device_type_of(model))


def is_compiled(model: torch.nn.Module) -> bool:
    """True when `model`, or a module inside it, is compiled (in place or by torch.compile's wrapper)."""
    return any(
        getattr(module, "_compiled_call_impl", None) is not None or hasattr(module, "_orig_mod")
        for module in model.modules()
    )
