"""`PartialState` on one process: its facts, the shared singleton, and process-control helpers.

Some tests pretend to be another rank by writing `process_index`/`num_processes` into the shared
state; the helpers under test only read those facts and start no collective.
"""

from __future__ import annotations

import datetime

import pytest
import torch

from accel_state import DistributedType, EnvVarError, PartialState
from accel_state.environment.device import choose_device, choose_process_group_backend
from accel_state.shared_state.partial_state import DEFAULT_TIMEOUT


def test_single_process_facts():
    state = PartialState()
    assert state.distributed_type is DistributedType.NO
    assert state.device == torch.device("cpu")
    assert (state.num_processes, state.process_index) == (1, 0)
    assert (state.num_local_processes, state.local_process_index) == (1, 0)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert not state.use_distributed
    assert state.backend is None
    assert state.launch_environment.source == "python"
    assert state.debug is False
    assert state.timeout == DEFAULT_TIMEOUT


def test_repr_names_type_and_device():
    text = repr(PartialState())
    assert "Distributed environment: NO" in text
    assert "Num processes: 1" in text
    assert "Device: cpu" in text


def test_instances_share_one_state():
    first, second = PartialState(), PartialState()
    assert first is not second
    assert first.__dict__ is second.__dict__
    first.custom_fact = 42
    assert second.custom_fact == 42


def test_later_arguments_do_not_reinitialise():
    PartialState(timeout=5)
    assert PartialState(timeout=99).timeout == datetime.timedelta(seconds=5)


def test_reset_state_forgets_and_rereads_the_environment(monkeypatch):
    state = PartialState()
    assert state.initialized
    PartialState._reset_state()
    assert not state.initialized
    monkeypatch.setenv("ACCEL_DEBUG_MODE", "1")
    monkeypatch.setenv("ACCEL_TIMEOUT", "12.5")
    fresh = PartialState()
    assert fresh.debug is True
    assert fresh.timeout == datetime.timedelta(seconds=12.5)


def test_timeout_argument_accepts_seconds_and_timedelta():
    assert PartialState(timeout=3).timeout == datetime.timedelta(seconds=3)
    PartialState._reset_state()
    assert PartialState(timeout=datetime.timedelta(minutes=2)).timeout == datetime.timedelta(minutes=2)


def test_bad_use_cpu_value_is_an_error(monkeypatch):
    monkeypatch.setenv("ACCEL_USE_CPU", "sometimes")
    with pytest.raises(EnvVarError, match="ACCEL_USE_CPU"):
        PartialState()


def _pretend_cuda(monkeypatch, devices: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)


def test_choose_device_uses_the_local_gpu_when_present(monkeypatch):
    _pretend_cuda(monkeypatch, devices=2)
    assert choose_device(cpu=False, local_rank=3) == torch.device("cuda", 1)
    assert choose_device(cpu=True, local_rank=3) == torch.device("cpu")
    assert choose_process_group_backend(torch.device("cuda", 0)) == "nccl"
    assert choose_process_group_backend(torch.device("cpu")) == "gloo"


def test_use_cpu_env_var_and_argument_keep_the_state_on_cpu(monkeypatch):
    _pretend_cuda(monkeypatch, devices=1)
    assert PartialState().device == torch.device("cuda", 0)
    PartialState._reset_state()
    assert PartialState(cpu=True).device == torch.device("cpu")
    PartialState._reset_state()
    monkeypatch.setenv("ACCEL_USE_CPU", "1")
    assert PartialState().device == torch.device("cpu")


def test_print_only_on_main_process(capsys):
    state = PartialState()
    state.print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"
    state.process_index = 1
    state.print("hidden")
    assert capsys.readouterr().out == ""


def test_on_main_process_decorator():
    state = PartialState()
    calls = []

    @state.on_main_process
    def record(value):
        calls.append(value)
        return value * 2

    assert record(3) == 6
    assert record.__name__ == "record"
    state.process_index, state.num_processes = 1, 2
    assert record(4) is None
    assert calls == [3]


def test_on_process_decorator_with_and_without_arguments():
    state = PartialState()
    calls = []

    @state.on_process(process_index=1)
    def on_one():
        calls.append("one")

    def on_zero():
        calls.append("zero")

    on_zero = state.on_process(on_zero, process_index=0)
    on_one()
    on_zero()
    assert calls == ["zero"]
    state.process_index, state.num_processes = 1, 2
    on_one()
    on_zero()
    assert calls == ["zero", "one"]


def test_on_last_and_local_main_process_decorators():
    state = PartialState()
    last = state.on_last_process(lambda: "last")
    local_main = state.on_local_main_process(lambda: "local")
    assert (last(), local_main()) == ("last", "local")
    state.num_processes = 2
    state.local_process_index = 1
    assert (last(), local_main()) == (None, None)


def test_main_process_first_runs_the_block_once_without_waiting():
    state = PartialState()
    ran = []
    with state.main_process_first():
        ran.append("main")
    with state.local_main_process_first():
        ran.append("local")
    state.wait_for_everyone()
    assert ran == ["main", "local"]


def test_split_between_processes_on_one_process_gives_everything():
    state = PartialState()
    data = {"a": [1, 2, 3], "b": torch.arange(3)}
    with state.split_between_processes(data) as share:
        assert share is data
    with state.split_between_processes(["x", "y"], apply_padding=True) as share:
        assert share == ["x", "y"]


def test_split_between_processes_uses_this_process_index():
    state = PartialState()
    state.num_processes, state.process_index = 3, 2
    with state.split_between_processes(list(range(7))) as share:
        assert share == [5, 6]
    with state.split_between_processes(torch.arange(7), apply_padding=True) as share:
        assert share.tolist() == [5, 6, 6]


def test_current_answers_without_building_the_state():
    assert PartialState.current() is None
    assert not PartialState._shared_state, "asking built nothing"
    state = PartialState(cpu=True)
    current = PartialState.current()
    assert current is not None and current.__dict__ is state.__dict__
    PartialState._reset_state()
    assert PartialState.current() is None
