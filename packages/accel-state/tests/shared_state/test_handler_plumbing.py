"""What the shared state takes from the kwargs handlers: process-group options and the gradient
accumulation plugin (the DDP comm hooks are the native backend's: backends/native)."""

from __future__ import annotations

import datetime

import pytest
import torch

from accel_state import (
    DistributedType,
    GradientAccumulationPlugin,
    GradientState,
    PartialState,
    ProcessGroupOptions,
    ProcessSetup,
    TorchCommunicator,
    register_backend,
)


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
def factory(backend_registry):
    recording = _RecordingFactory()
    register_backend(DistributedType.XLA, recording)
    return recording


def test_process_group_options_reach_the_factory_only_when_asked_for(factory):
    PartialState(distributed_type="XLA")
    PartialState._reset_state()
    PartialState(distributed_type="XLA", backend="gloo", init_method="tcp://127.0.0.1:1")
    assert factory.calls == [{}, {"process_group": ProcessGroupOptions("gloo", "tcp://127.0.0.1:1")}]


def test_timeout_argument_reaches_partial_state():
    assert PartialState(timeout=datetime.timedelta(seconds=12)).timeout == datetime.timedelta(seconds=12)


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
