"""A process group that already runs (Ray Train's, a notebook launcher's, the script's own) is adopted:
its rank and world size are the state's, and it is not initialised a second time."""

from __future__ import annotations

import types

import pytest

from accel_state import DistributedType, PartialState
from accel_state.environment.launch_env import LaunchEnvironment, LaunchEnvironmentError
from accel_state.process_group import group as process_group


def _running_group(monkeypatch: pytest.MonkeyPatch, rank: int, world_size: int) -> list[str]:
    """Make the group module see a gloo group at `rank` of `world_size`; return the calls that
    would have made or torn down a group (none are expected)."""
    made: list[str] = []
    fake = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_rank=lambda: rank,
        get_world_size=lambda: world_size,
        init_process_group=lambda *args, **kwargs: made.append("init_process_group"),
        destroy_process_group=lambda *args, **kwargs: made.append("destroy_process_group"),
    )
    monkeypatch.setattr(process_group, "dist", fake)
    return made


def test_without_a_running_group_the_launcher_variables_stand():
    found = LaunchEnvironment(
        rank=1, world_size=2, master_addr="127.0.0.1", master_port=29500, source="torchrun"
    )
    assert process_group.adopt_running_group(found) is found


def test_a_group_matching_the_launcher_variables_keeps_them(monkeypatch):
    _running_group(monkeypatch, rank=1, world_size=2)
    found = LaunchEnvironment(rank=1, world_size=2, local_rank=1, local_world_size=2, source="torchrun")
    assert process_group.adopt_running_group(found) is found


def test_a_group_made_without_launcher_variables_gives_rank_and_world_size(monkeypatch):
    _running_group(monkeypatch, rank=3, world_size=4)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    adopted = process_group.adopt_running_group(LaunchEnvironment())
    assert (adopted.rank, adopted.world_size, adopted.local_rank, adopted.local_world_size) == (3, 4, 1, 2)
    assert adopted.source == "process group"


def test_launcher_variables_that_contradict_the_group_are_an_error(monkeypatch):
    _running_group(monkeypatch, rank=0, world_size=2)
    found = LaunchEnvironment(rank=1, world_size=4, local_rank=1, local_world_size=4, source="torchrun")
    with pytest.raises(LaunchEnvironmentError, match=r"rank 0 of 2.*torchrun environment says rank 1 of 4"):
        process_group.adopt_running_group(found)


def test_the_state_adopts_the_group_without_making_another(monkeypatch):
    made = _running_group(monkeypatch, rank=1, world_size=2)
    state = PartialState(cpu=True)
    assert (state.process_index, state.num_processes, state.local_process_index) == (1, 2, 1)
    assert state.distributed_type == DistributedType.MULTI_CPU
    assert str(state.device) == "cpu"
    assert made == []
