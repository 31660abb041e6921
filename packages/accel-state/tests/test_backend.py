"""The Backend seam: the registry, entry points, and the native backend on one process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from accel_state import (
    Backend,
    BackendNotAvailableError,
    BackendOptions,
    DistributedType,
    NativeBackend,
    PartialState,
    PreparedObjects,
    ProcessSetup,
    TorchCommunicator,
    create_backend,
    register_backend,
)
from accel_state.seam import backend as backend_module
from accel_state.shared_state.storage import per_thread_state, use_per_thread_state


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


class _FakeFactory:
    """A registered backend: records how it set the process up and what it built."""

    per_thread_state = False
    available = True

    def __init__(self, kind=DistributedType.XLA):
        self.kind = kind
        self.setups = []
        self.built = []

    def is_available(self):
        return self.available

    def setup_process(self, launch, *, cpu, timeout):
        self.setups.append((launch.world_size, cpu, timeout))
        return ProcessSetup(self.kind, torch.device("cpu"), None, TorchCommunicator())

    def __call__(self, state, options):
        self.built.append((state, options))
        return ("fake backend", state, options)


def test_no_distribution_gets_the_native_backend(registry):
    backend = create_backend(DistributedType.NO, PartialState())
    assert isinstance(backend, NativeBackend)
    assert isinstance(backend, Backend)
    assert backend.state.__dict__ is PartialState().__dict__


def test_registered_factory_builds_the_backend_with_its_options(registry):
    factory = _FakeFactory()
    register_backend("XLA", factory)
    state, options = PartialState(), BackendOptions(plugin={"zero": 3})
    assert create_backend(DistributedType.XLA, state, options) == ("fake backend", state, options)
    assert factory.built == [(state, options)]


def test_unknown_type_without_registration_names_type_and_extra(registry):
    backend_module._registry.pop(DistributedType.DEEPSPEED, None)
    with pytest.raises(
        BackendNotAvailableError,
        match=r"DEEPSPEED; install its adapter package, accel-deepspeed .*packages/accel-deepspeed/README.md",
    ):
        create_backend(DistributedType.DEEPSPEED, PartialState())


def test_a_factory_whose_libraries_are_missing_is_not_available(registry):
    factory = _FakeFactory()
    factory.available = False
    register_backend(DistributedType.FSDP, factory)
    with pytest.raises(
        BackendNotAvailableError,
        match=r"FSDP \(_FakeFactory\) cannot run here: a library it needs is missing; check torch's install$",
    ):
        create_backend(DistributedType.FSDP, PartialState())


def test_entry_point_is_loaded_and_remembered(registry):
    backend_module._registry.pop(DistributedType.XLA, None)
    loads = []
    factory = _FakeFactory()

    def load():
        loads.append(1)
        return factory

    registry.append(SimpleNamespace(name="XLA", load=load))
    state = PartialState()
    assert create_backend(DistributedType.XLA, state)[0] == "fake backend"
    create_backend(DistributedType.XLA, state)
    assert loads == [1]


def test_registry_fixture_left_no_extra_entries():
    assert DistributedType.XLA not in backend_module._registry


def test_the_native_backend_is_found_without_registration_by_import(registry):
    backend_module._registry.clear()
    assert backend_module.backend_factory(DistributedType.MULTI_CPU) is NativeBackend


def test_partial_state_hands_setup_to_the_backend_of_the_requested_type(registry, monkeypatch):
    factory = _FakeFactory(DistributedType.XLA)
    register_backend(DistributedType.XLA, factory)
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "xla")
    state = PartialState(cpu=True, timeout=12)
    assert state.distributed_type is DistributedType.XLA
    assert [(world, cpu, timeout.total_seconds()) for world, cpu, timeout in factory.setups] == [
        (1, True, 12.0)
    ]


def test_the_argument_beats_the_environment_variable(registry, monkeypatch):
    factory = _FakeFactory(DistributedType.FSDP)
    register_backend(DistributedType.FSDP, factory)
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "XLA")
    assert PartialState(distributed_type="FSDP").distributed_type is DistributedType.FSDP


def test_a_bad_distributed_type_names_the_variable(monkeypatch):
    from accel_state import EnvVarError

    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "TPU")
    with pytest.raises(EnvVarError, match=r"ACCEL_DISTRIBUTED_TYPE.*'TPU'.*MULTI_CPU"):
        PartialState()
    assert not PartialState._shared_state  # nothing half-built


def test_a_backend_may_ask_for_shared_state_per_thread(registry, monkeypatch):
    import threading

    factory = _FakeFactory(DistributedType.XLA)
    factory.per_thread_state = True
    register_backend(DistributedType.XLA, factory)
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "XLA")
    seen = []
    try:
        PartialState()
        assert per_thread_state()

        def replica():
            seen.append(PartialState()._shared_state)

        thread = threading.Thread(target=replica)
        thread.start()
        thread.join()
        assert len(factory.setups) == 2  # the thread set its own state up
        assert seen[0] is not PartialState()._shared_state
    finally:
        PartialState._reset_state()
        use_per_thread_state(False)


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
