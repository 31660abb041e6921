"""notebook_launcher: forks N ranks through torch's elastic agent (real processes), or runs in-process."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from accel_launch import NotebookLaunchError, notebook_launcher

# A forked rank that hangs fails its test within this, not after torch's 30 minutes.
FORKED_RANK_TIMEOUT = datetime.timedelta(seconds=120)


def record_rank(folder: str, value: int) -> dict[str, object]:
    """Write this rank's view to a file and return it (module level, as a notebook cell would define)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=FORKED_RANK_TIMEOUT)
    ranks: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, dist.get_rank())
    dist.destroy_process_group()
    view = {"rank": int(os.environ["RANK"]), "world": ranks, "cpu": os.environ.get("ACCEL_USE_CPU"),
            "precision": os.environ.get("ACCEL_MIXED_PRECISION"), "value": value}  # fmt: skip
    Path(folder, f"rank_{view['rank']}").write_text(repr(view))
    return view


def fail_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is unhappy")


@pytest.mark.slow
def test_notebook_launcher_runs_two_gloo_ranks(tmp_path):
    results = notebook_launcher(record_rank, (str(tmp_path), 5), num_processes=2, mixed_precision="bf16")
    assert [r["rank"] for r in results] == [0, 1]
    for result in results:
        assert result["world"] == [0, 1]
        assert (result["cpu"], result["precision"], result["value"]) == ("1", "bf16", 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "rank_1"]
    assert "ACCEL_USE_CPU" not in os.environ  # restored after the launch


def test_notebook_launcher_one_process_runs_in_process():
    assert notebook_launcher(os.getpid, num_processes=1) == [os.getpid()]
    assert notebook_launcher(os.getpid) == [os.getpid()]  # None on a CPU machine


@pytest.mark.slow
def test_notebook_launcher_names_the_failing_rank():
    with pytest.raises(NotebookLaunchError, match="rank 1 of 2 failed"):
        notebook_launcher(fail_on_rank_one, num_processes=2)


@pytest.mark.slow
def test_a_failed_notebook_job_is_torchs_child_failed_error():
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    with pytest.raises(ChildFailedError, match="rank 1 of 2 failed") as caught:
        notebook_launcher(fail_on_rank_one, num_processes=2, rdzv_backend="c10d")
    assert isinstance(caught.value, NotebookLaunchError)
    assert list(caught.value.failures) == [1]
    assert caught.value.failures[1].exitcode != 0


def store_server_threads() -> int:
    """Return how many TCPStore server threads this process runs."""
    tasks = Path("/proc/self/task")
    return sum((task / "comm").read_text().startswith("pt_tcpstore") for task in tasks.iterdir())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to count threads")
def test_a_kept_failure_holds_no_store_server_thread():
    # Workers are forked from this process: a store left serving here from an earlier job would be
    # inherited by every later job's workers.
    before = store_server_threads()
    with pytest.raises(NotebookLaunchError) as caught:
        notebook_launcher(fail_on_rank_one, num_processes=2)
    assert caught.value.__cause__ is not None  # the error and its cause are still held ...
    assert store_server_threads() == before  # ... but not the finished job's store


@pytest.mark.slow
@pytest.mark.parametrize("rdzv_backend", ["static", "c10d"])
def test_accelerates_rdzv_backends_are_accepted(tmp_path, rdzv_backend):
    results = notebook_launcher(record_rank, (str(tmp_path), 1), num_processes=2, rdzv_backend=rdzv_backend)
    assert [r["world"] for r in results] == [[0, 1], [0, 1]]


def test_notebook_launcher_refuses_after_cuda_was_initialised(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(NotebookLaunchError, match="CUDA was already initialised in this process"):
        notebook_launcher(fail_on_rank_one, num_processes=2)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_processes": 0}, "num_processes must be at least 1, got 0"),
        ({"mixed_precision": "fp8"}, "mixed_precision must be one of no, fp16, bf16, got 'fp8'"),
        ({"use_port": "abc"}, "use_port must be a port number in \\[1, 65535\\], got 'abc'"),
        ({"use_port": 70000}, "use_port must be a port number"),
        ({"rdzv_backend": "etcd"}, "rdzv_backend must be one of static, c10d .*, got 'etcd'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(arguments, message):
    calls = []
    with pytest.raises(NotebookLaunchError, match=message):
        notebook_launcher(calls.append, (1,), **{"num_processes": 2, **arguments})
    assert calls == []
