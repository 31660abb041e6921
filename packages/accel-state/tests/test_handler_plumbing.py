"""What accel_state takes from the kwargs handlers: process-group options, DDP comm hooks and the
gradient accumulation plugin."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest
import torch

from accel_state import (
    CommHookOptions,
    DDPCommunicationHookType,
    DistributedType,
    GradientAccumulationPlugin,
    GradientState,
    PartialState,
    ProcessGroupOptions,
    ProcessSetup,
    TorchCommunicator,
    register_backend,
)
from accel_state.backends.native.ddp_comm_hooks import register_comm_hook
from accel_state.seam import backend as backend_module


class _RecordingFactory:
    per_thread_state = False

    def __init__(self):
        self.calls = []

    def is_available(self):
        return True

    def setup_process(self, launch, *, cpu, timeout, **extra):
        self.calls.append(extra)
        return ProcessSetup(DistributedType.XLA, torch.device("cpu"), None, TorchCommunicator())


@pytest.fixture
def factory(monkeypatch):
    saved = dict(backend_module._registry)
    monkeypatch.setattr(backend_module, "metadata", SimpleNamespace(entry_points=lambda group: []))
    recording = _RecordingFactory()
    register_backend(DistributedType.XLA, recording)
    try:
        yield recording
    finally:
        backend_module._registry.clear()
        backend_module._registry.update(saved)


def test_process_group_options_reach_the_factory_only_when_asked_for(factory):
    PartialState(distributed_type="XLA")
    PartialState._reset_state()
    PartialState(distributed_type="XLA", backend="gloo", init_method="tcp://127.0.0.1:1")
    assert factory.calls == [{}, {"process_group": ProcessGroupOptions("gloo", "tcp://127.0.0.1:1")}]


def test_timeout_argument_reaches_partial_state():
    assert PartialState(timeout=datetime.timedelta(seconds=12)).timeout == datetime.timedelta(seconds=12)


def test_comm_hook_options_accept_strings_and_refuse_unknown_names():
    options = CommHookOptions("POWER_SGD", "bf16", {"matrix_approximation_rank": 2})
    assert options.hook is DDPCommunicationHookType.POWER_SGD and options.enabled
    assert options.wrapper is DDPCommunicationHookType.BF16
    assert not CommHookOptions().enabled
    with pytest.raises(ValueError, match="comm_hook 'int8'"):
        CommHookOptions("int8")
    with pytest.raises(ValueError, match="comm_wrapper 'batched_power_sgd' is not a wrapper"):
        CommHookOptions("fp16", "batched_power_sgd")


class _RecordingModel:
    def __init__(self):
        self.registered = []

    def register_comm_hook(self, state, hook):
        self.registered.append((state, hook))


def test_register_comm_hook_builds_powersgd_state_and_wraps_the_hook():
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    model = _RecordingModel()
    register_comm_hook(model, CommHookOptions())  # type: ignore[arg-type]
    assert model.registered == []
    register_comm_hook(model, CommHookOptions("fp16"))  # type: ignore[arg-type]
    register_comm_hook(
        model,  # type: ignore[arg-type]
        CommHookOptions("batched_power_sgd", "fp16", {"matrix_approximation_rank": 3}),
    )
    (state, hook), (sgd_state, wrapped) = model.registered
    assert state is None and hook.__name__ == "fp16_compress_hook"
    assert isinstance(sgd_state, PowerSGDState) and sgd_state.matrix_approximation_rank == 3
    assert sgd_state.process_group is None
    assert wrapped.__name__ == "fp16_compress_wrapper_hook"


def test_gradient_accumulation_plugin_sets_the_gradient_state():
    state = GradientState(
        gradient_accumulation_plugin=GradientAccumulationPlugin(4, sync_with_dataloader=False)
    )
    assert state.num_steps == 4
    assert not state.sync_with_dataloader and state.adjust_scheduler and not state.sync_each_batch
    assert state.plugin_kwargs == {"num_steps": 4, "sync_with_dataloader": False}
    with pytest.raises(ValueError, match="num_steps must be a positive integer, got 0"):
        GradientAccumulationPlugin(0)


def test_gradient_state_defaults_without_a_plugin():
    state = GradientState()
    assert state.sync_with_dataloader and state.adjust_scheduler and not state.sync_each_batch
    assert state.plugin_kwargs == {}
