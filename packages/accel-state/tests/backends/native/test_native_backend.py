"""The native backend on one process: unwrapping, state dicts, placement, clipping, backward."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from accel_state import NativeBackend, PartialState, PreparedObjects


class _CompileWrapper(torch.nn.Module):
    """Looks like torch.compile's OptimizedModule: holds the model as `_orig_mod`."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self._orig_mod = inner


def test_unwrap_model_is_identity_for_plain_modules_and_strips_compile_wrappers():
    backend = NativeBackend(PartialState())
    model = torch.nn.Linear(2, 2)
    assert backend.unwrap_model(model) is model
    assert backend.unwrap_model(_CompileWrapper(_CompileWrapper(model))) is model
    assert set(backend.get_state_dict(_CompileWrapper(model))) == {"weight", "bias"}


def test_load_state_dict_loads_into_the_wrapped_module():
    backend = NativeBackend(PartialState())
    model, source = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    backend.load_state_dict(_CompileWrapper(model), backend.get_state_dict(source))
    assert torch.equal(model.weight, source.weight) and torch.equal(model.bias, source.bias)


def test_prepare_places_models_on_the_state_device_without_ddp():
    state = SimpleNamespace(device=torch.device("meta"), use_distributed=False)
    backend = NativeBackend(state)
    model = torch.nn.Linear(2, 2)
    prepared = backend.prepare(PreparedObjects(models=[model]))
    assert type(prepared.models[0]) is torch.nn.Linear
    assert prepared.models[0].weight.device.type == "meta"
    unplaced = torch.nn.Linear(2, 2)
    kept = backend.prepare(PreparedObjects(models=[unplaced], device_placement={id(unplaced): False}))
    assert kept.models[0].weight.device.type == "cpu"


def test_clip_grad_norm_returns_the_norm_before_clipping():
    backend = NativeBackend(PartialState())
    param = torch.nn.Parameter(torch.zeros(2))
    param.grad = torch.tensor([3.0, 4.0])
    norm = backend.clip_grad_norm_([param], max_norm=1.0)
    assert norm.item() == pytest.approx(5.0)
    assert param.grad.norm().item() == pytest.approx(1.0, rel=1e-4)


def test_clip_grad_value_clamps_each_element():
    backend = NativeBackend(PartialState())
    param = torch.nn.Parameter(torch.zeros(3))
    param.grad = torch.tensor([-5.0, 0.5, 5.0])
    backend.clip_grad_value_([param], 1.0)
    assert param.grad.tolist() == [-1.0, 0.5, 1.0]


def test_backward_and_no_sync_on_a_plain_module():
    backend = NativeBackend(PartialState())
    param = torch.nn.Parameter(torch.tensor(2.0))
    with backend.no_sync(torch.nn.Linear(1, 1)):
        backend.backward(param * param)
    assert param.grad.item() == 4.0


def test_steps_are_plain_only_without_a_scaler_and_with_the_shared_step():
    # plain_steps lets the facade and the optimizer wrapper call backward and step themselves: a
    # scaler, or a backend whose step does more (XLA reduces gradients in it), must say False.
    backend = NativeBackend(PartialState())
    assert backend.precision.scaler is None and backend.plain_steps is True
    backend.precision.scaler = torch.amp.GradScaler("cpu")
    assert backend.plain_steps is False

    class ReducingBackend(NativeBackend):
        def optimizer_step(self, optimizer, closure=None):
            return super().optimizer_step(optimizer, closure)

    class DividingBackend(NativeBackend):
        def backward(self, loss, **kwargs):
            super().backward(loss, **kwargs)

    assert ReducingBackend(PartialState()).plain_steps is False
    assert DividingBackend(PartialState()).plain_steps is False
