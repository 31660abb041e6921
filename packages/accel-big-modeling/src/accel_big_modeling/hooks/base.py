"""Hooks around a module's forward: the mechanism every offload strategy is built on.

A hook is stored on the module as `_hf_hook` and the original forward as `_old_forward`, the
attribute names of Accelerate, so code that checks for them (transformers does) keeps working.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn


class ModelHook:
    """Code run around a module's forward: `pre_forward` may change the inputs, `post_forward` the output.

    Set `no_grad = True` to run the wrapped forward under `torch.no_grad()`.
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Return `module` prepared for this hook (called once when the hook is attached)."""
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Return the (args, kwargs) the forward will receive."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Return the output the caller will receive."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Return `module` restored as it was before `init_hook` (called when the hook is removed)."""
        return module


class SequentialHook(ModelHook):
    """Several hooks run in order (post_forward in the same order, as Accelerate does)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = list(hooks)

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def _hooked_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    hook: ModelHook = module._hf_hook  # type: ignore[assignment]
    args, kwargs = hook.pre_forward(module, *args, **kwargs)
    if hook.no_grad:
        with torch.no_grad():
            output = module._old_forward(*args, **kwargs)  # type: ignore[operator]
    else:
        output = module._old_forward(*args, **kwargs)  # type: ignore[operator]
    return hook.post_forward(module, output)


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Attach `hook` to `module` and return it; replaces an existing hook unless `append` chains after it."""
    existing = getattr(module, "_hf_hook", None)
    if append and isinstance(existing, ModelHook):
        remove_hook_from_module(module)
        hook = SequentialHook(existing, hook)
    elif isinstance(existing, ModelHook):
        # Replacing: the first hook's cleanup runs, the original forward is kept.
        remove_hook_from_module(module)
    old_forward = module.forward
    module = hook.init_hook(module)
    module._hf_hook = hook  # type: ignore[assignment]
    module._old_forward = old_forward  # type: ignore[assignment]
    forward = functools.partial(_hooked_forward, module)
    module.forward = functools.update_wrapper(forward, old_forward)
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Detach the hook of `module` (and of its submodules if `recurse`), restoring its own forward."""
    hook = module.__dict__.get("_hf_hook")
    if isinstance(hook, ModelHook):
        hook.detach_hook(module)
        del module._hf_hook
    if "_old_forward" in module.__dict__:
        old_forward = module.__dict__.pop("_old_forward")
        own = getattr(old_forward, "__func__", None) is type(module).forward
        if own and getattr(old_forward, "__self__", None) is module:
            module.__dict__.pop("forward", None)  # back to the class's forward, nothing left on the instance
        else:
            module.forward = old_forward
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Remove the hooks of `module` and of every submodule."""
    remove_hook_from_module(module, recurse=True)
