"""The backends' exit teardown (accel_state.backends.teardown): what runs, in which order, and
that a real one-process gloo job lets its group go with the prepared models still held."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from accel_state.backends import teardown
from accel_state.backends.common import BackendBase


@pytest.fixture
def registry(monkeypatch):
    """An empty registry for the test (the process's own stays as it was)."""
    monkeypatch.setattr(teardown, "_held", {})


def _backend_class(name: str, order: list[str]) -> type[BackendBase]:
    def record(cls: type) -> None:
        order.append(f"{cls.__name__}.teardown")

    return type(name, (BackendBase,), {"teardown": classmethod(record)})


def test_backends_tear_down_last_first_each_after_releasing_its_objects(registry):
    order: list[str] = []
    first, second = _backend_class("First", order)(), _backend_class("Second", order)()
    a, b, c = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    names = {id(a): "a", id(b): "b", id(c): "c"}

    def release(held: torch.nn.Module) -> None:
        order.append(f"release {names[id(held)]}")

    teardown.release_at_exit(first, a, release)
    teardown.release_at_exit(second, b, release)
    teardown.release_at_exit(first, c, release)
    teardown.release_at_exit(first, a, release)  # held once
    teardown.teardown_backends()
    assert order == ["release b", "Second.teardown", "release a", "release c", "First.teardown"]
    teardown.teardown_backends()
    assert len(order) == 5, "each runs once"


def test_what_the_script_dropped_is_not_released_and_a_failure_stops_nothing(registry):
    order: list[str] = []
    backend = _backend_class("Kept", order)()

    def failing(held: torch.nn.Module) -> None:
        order.append("failing")
        raise RuntimeError("already gone")

    dropped, kept = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    teardown.release_at_exit(backend, dropped, lambda held: order.append("dropped"))
    teardown.release_at_exit(backend, kept, failing)
    del dropped
    gc.collect()
    teardown.teardown_backends()
    assert order == ["failing", "Kept.teardown"]


_JOB = textwrap.dedent(
    """
    import atexit, datetime, json
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from accel_state import FsdpBackend, NativeBackend, PreparedObjects
    from accel_state.process_group.group import init_single_process_group

    seen = []

    def report():  # registered first: runs after accel's teardown
        print("REPORT " + json.dumps({"seen": seen, "group_left": not dist.is_initialized()}))

    atexit.register(report)
    init_single_process_group("gloo", datetime.timedelta(seconds=60))
    state = SimpleNamespace(
        device=torch.device("cpu"), num_processes=1, process_index=0, use_distributed=True
    )
    ddp = NativeBackend(state).prepare(PreparedObjects(models=[torch.nn.Linear(2, 2)])).models[0]
    fsdp_backend = FsdpBackend(state)
    sharded = fsdp_backend.prepare(PreparedObjects(models=[torch.nn.Linear(2, 2)])).models[0]
    mesh = fsdp_backend.mesh()

    def native_teardown(cls):
        seen.append(["native", dist.is_initialized(), "reducer" in ddp.__dict__])

    def fsdp_teardown(cls):
        seen.append(["fsdp", dist.is_initialized(), len(mesh._pg_registry), "reducer" in ddp.__dict__])

    NativeBackend.teardown = classmethod(native_teardown)
    FsdpBackend.teardown = classmethod(fsdp_teardown)
    held = ["reducer" in ddp.__dict__, len(mesh._pg_registry) > 0]
    print("PREPARED " + type(ddp).__name__ + " " + type(sharded).__name__ + " " + json.dumps(held))
    """
)


@pytest.mark.slow
def test_a_one_process_gloo_job_releases_its_models_then_leaves_the_group_at_exit(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(_JOB)
    result = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PREPARED DistributedDataParallel FSDPLinear [true, true]" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    # FSDP prepared last, so it goes first (its mesh released, DDP's model not yet), then native
    # (its DDP model released); both while the group is still up, which goes after them.
    assert report["seen"] == [["fsdp", True, 0, True], ["native", True, False]]
    assert report["group_left"] is True
