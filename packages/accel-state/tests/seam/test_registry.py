"""The Backend seam's registry: registered factories, entry points, and what PartialState asks of them."""

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
    ProcessSetup,
    TorchCommunicator,
    create_backend,
    register_backend,
)
from accel_state.seam import backend as backend_module
from accel_state.shared_state.storage import per_thread_state, use_per_thread_state


@pytest.fixture
def registry(backend_registry):
    """The registry restored around the test; installed adapters hidden (see conftest)."""
    return backend_registry


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

    registry["XLA"] = SimpleNamespace(name="XLA", load=load, dist=None)
    state = PartialState()
    assert create_backend(DistributedType.XLA, state)[0] == "fake backend"
    create_backend(DistributedType.XLA, state)
    assert loads == [1]


def test_registry_fixture_left_no_extra_entries():
    assert DistributedType.XLA not in backend_module._registry


def test_the_native_backend_is_found_through_accel_states_own_entry_points(registry):
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
    assert PartialState.current() is None  # nothing half-built


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


def test_accel_states_backends_are_declared_as_entry_points_like_an_adapters():
    installed = backend_module._installed()
    own = {name for name, entry in installed.items() if entry.dist.name == "accel-state"}
    assert own == {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP"}
    assert installed["NO"].load() is NativeBackend


def test_the_entry_points_are_read_once_and_accel_states_alone_for_its_own_types(monkeypatch):
    scans, lookups = [], []
    real_scan, real_lookup = backend_module.metadata.entry_points, backend_module.metadata.distribution

    def scan(**kwargs):
        scans.append(kwargs)
        return real_scan(**kwargs)

    def lookup(name):
        lookups.append(name)
        return real_lookup(name)

    saved = dict(backend_module._registry)
    monkeypatch.setattr(backend_module.metadata, "entry_points", scan)
    monkeypatch.setattr(backend_module.metadata, "distribution", lookup)
    backend_module._own_entry_points.cache_clear()
    backend_module._installed.cache_clear()
    try:
        backend_module._registry.clear()
        backend_module.backend_factory(DistributedType.NO)
        backend_module.backend_factory(DistributedType.MULTI_CPU)
        assert (lookups, scans) == (["accel-state"], []), "the common runs read one distribution's metadata"
        for _ in range(2):
            with pytest.raises(BackendNotAvailableError):
                backend_module.backend_factory(DistributedType.MULTI_NPU)
        assert (lookups, scans) == (["accel-state"], [{"group": "accel.backends"}])
    finally:
        backend_module._own_entry_points.cache_clear()
        backend_module._installed.cache_clear()
        backend_module._registry.clear()
        backend_module._registry.update(saved)


def test_metadata_without_accel_states_backends_says_to_reinstall_it(registry, monkeypatch):
    monkeypatch.setattr(backend_module, "_own_entry_points", lambda: {})
    monkeypatch.setattr(backend_module, "_installed", lambda: {})
    backend_module._registry.clear()
    with pytest.raises(
        BackendNotAvailableError,
        match=r"distributed type NO, and accel-state's installed metadata declares none "
        r"\(entry-point group accel.backends\): reinstall accel-state$",
    ):
        backend_module.backend_factory(DistributedType.NO)


def test_an_adapters_missing_libraries_name_the_distribution_that_declares_it(registry):
    factory = _FakeFactory()
    factory.available = False
    registry["XLA"] = SimpleNamespace(
        name="XLA", load=lambda: factory, dist=SimpleNamespace(name="accel-xla")
    )
    backend_module._registry.pop(DistributedType.XLA, None)
    with pytest.raises(
        BackendNotAvailableError,
        match=r"check accel-xla's install \(the install line is in packages/accel-xla/README.md",
    ):
        create_backend(DistributedType.XLA, PartialState())
