"""Compiling one module's call in place: the object stays itself (its hooks, its wrapper's methods,
its state dict keys), and its calls run compiled."""

from __future__ import annotations

from typing import Any

import torch


def compile_in_place(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """Compile `module`'s call in place and return it.

    Dynamo does not start tracing in torch's own files: `Module.compile` compiles `_call_impl`,
    whose frame it skips, and picks up the frame of a user's `forward` (hooks run eagerly around
    it, as with torch.compile's wrapper). A module whose forward is torch's own (DDP, an
    `nn.Sequential`, a `Linear`) would then compile nothing; its call is entered through a function
    of this file instead, from which dynamo inlines torch's code, as torch.compile's wrapper does.
    """
    forward = getattr(module.forward, "__func__", None)
    if forward is not None and str(getattr(forward, "__module__", "")).startswith("torch."):
        call_impl = module._call_impl

        def call(*args: Any, **kwargs: Any) -> Any:
            return call_impl(*args, **kwargs)

        module._compiled_call_impl = torch.compile(call, **compile_kwargs)
    else:
        torch.nn.Module.compile(module, **compile_kwargs)  # unbound: an engine's `compile` differs
    return module
