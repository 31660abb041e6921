"""Hook semantics: add, replace, append, remove, no_grad, io_same_device, offload around a forward."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accel_big_modeling.hooks import (
    AlignDevicesHook,
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    remove_hook_from_module,
    remove_hook_from_submodules,
)


class AddOne(ModelHook):
    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (args[0] + 1,), kwargs


class Double(ModelHook):
    def post_forward(self, module: nn.Module, output: Any) -> Any:
        return output * 2


class Detached(ModelHook):
    def __init__(self) -> None:
        self.detached = False

    def detach_hook(self, module: nn.Module) -> nn.Module:
        self.detached = True
        return module


def _identity() -> nn.Module:
    return nn.Identity()


def test_add_then_remove_restores_the_class_forward() -> None:
    module = _identity()
    x = torch.ones(2)
    add_hook_to_module(module, AddOne())
    assert torch.equal(module(x), x + 1)
    assert isinstance(module._hf_hook, AddOne)
    remove_hook_from_module(module)
    assert torch.equal(module(x), x)
    assert (
        "forward" not in module.__dict__
        and not hasattr(module, "_hf_hook")
        and not hasattr(module, "_old_forward")
    )


def test_add_replaces_unless_append() -> None:
    module = _identity()
    x = torch.ones(2)
    first = Detached()
    add_hook_to_module(module, first)
    add_hook_to_module(module, AddOne())
    assert first.detached and isinstance(module._hf_hook, AddOne)
    add_hook_to_module(module, Double(), append=True)
    assert isinstance(module._hf_hook, SequentialHook)
    assert torch.equal(module(x), (x + 1) * 2)
    remove_hook_from_module(module)
    assert torch.equal(module(x), x)


def test_no_grad_hook() -> None:
    class NoGrad(ModelHook):
        no_grad = True

    module = nn.Linear(2, 2)
    add_hook_to_module(module, NoGrad())
    assert not module(torch.ones(2)).requires_grad
    remove_hook_from_module(module)
    assert module(torch.ones(2)).requires_grad


def test_remove_recurse_and_submodules() -> None:
    model = nn.Sequential(_identity(), nn.Sequential(_identity()))
    for module in model.modules():
        add_hook_to_module(module, AddOne())
    remove_hook_from_module(model)
    assert hasattr(model[1][0], "_hf_hook")
    remove_hook_from_submodules(model)
    assert not any(hasattr(m, "_hf_hook") for m in model.modules())
    assert torch.equal(model(torch.zeros(1)), torch.zeros(1))


class MakesCpu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ones(x.shape)


def test_io_same_device_returns_outputs_where_inputs_were() -> None:
    # The forward makes its output on the CPU; the inputs come from (and run on) the meta device.
    module = MakesCpu()
    add_hook_to_module(module, AlignDevicesHook(execution_device="meta", io_same_device=True))
    assert module(torch.ones(3, device="meta")).is_meta
    add_hook_to_module(module, AlignDevicesHook(execution_device="meta"))
    assert module(torch.ones(3, device="meta")).device.type == "cpu"


def test_offload_hook_materialises_weights_only_during_forward() -> None:
    seen: list[bool] = []

    class Recording(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(self.weight.is_meta)
            return super().forward(x)

    module = Recording(3, 2)
    reference = nn.Linear(3, 2)
    reference.load_state_dict(module.state_dict())
    add_hook_to_module(module, AlignDevicesHook(execution_device="cpu", offload=True))
    assert module.weight.is_meta
    x = torch.randn(4, 3)
    assert torch.equal(module(x), reference(x))
    assert seen == [False] and module.weight.is_meta
    remove_hook_from_module(module)
    assert not module.weight.is_meta and torch.equal(module.weight, reference.weight)


def test_skip_keys_stay_put() -> None:
    class Echo(nn.Module):
        def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, cache

    module = Echo()
    add_hook_to_module(module, AlignDevicesHook(execution_device="meta", skip_keys="cache"))
    x, cache = module(torch.ones(1), cache=torch.ones(1))
    assert x.is_meta and cache.device.type == "cpu"
