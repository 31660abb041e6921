"""The Backend seam: the registry, entry points, and the native backend on one process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from accel_state import (
    Backend,
    BackendNotAvailableError,
    DistributedType,
    NativeBackend,
    PartialState,
    Preparation,
    create_backend,
    register_backend,
)
from accel_state import backend as backend_module


@pytest.fixture
def registry(monkeypatch):
    """Restore the backend registry and hide installed entry points around the test."""
    saved = dict(backend_module._registry)
    entry_points = []
    monkeypatch.setattr(backend_module, "metadata", SimpleNamespace(entry_points=lambda group: entry_points))
    try:
        yield entry_points
    finally:
        backend_module._registry.clear()
        backend_module._registry.update(saved)


def test_no_distribution_gets_the_native_backend(registry):
    backend = create_backend(DistributedType.NO, PartialState())
    assert isinstance(backend, NativeBackend)
    assert isinstance(backend, Backend)
    assert backend.state.__dict__ is PartialState().__dict__


def test_registered_factory_builds_the_backend(registry):
    made = []

    def factory(state):
        made.append(state)
        return "fake backend"

    register_backend("XLA", factory)
    state = PartialState()
    assert create_backend(DistributedType.XLA, state) == "fake backend"
    assert made == [state]


def test_unknown_type_without_registration_names_type_and_extra(registry):
    backend_module._registry.pop(DistributedType.DEEPSPEED, None)
    with pytest.raises(BackendNotAvailableError, match=r"DEEPSPEED.*accel\[deepspeed\]"):
        create_backend(DistributedType.DEEPSPEED, PartialState())


def test_entry_point_is_loaded_and_remembered(registry):
    backend_module._registry.pop(DistributedType.XLA, None)
    loads = []

    def load():
        loads.append(1)
        return lambda state: ("xla backend", state)

    registry.append(SimpleNamespace(name="XLA", load=load))
    state = PartialState()
    assert create_backend(DistributedType.XLA, state) == ("xla backend", state)
    create_backend(DistributedType.XLA, state)
    assert loads == [1]


def test_registry_fixture_left_no_extra_entries():
    assert DistributedType.XLA not in backend_module._registry
    assert set(backend_module._registry) >= {DistributedType.NO, DistributedType.MULTI_CPU}


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
    prepared = backend.prepare(Preparation(models=[model]), device_placement=True)
    assert type(prepared.models[0]) is torch.nn.Linear
    assert prepared.models[0].weight.device.type == "meta"
    kept = backend.prepare(Preparation(models=[torch.nn.Linear(2, 2)]), device_placement=False)
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
