"""A figure's rounds are spread over several starts of its jobs (a job's placement lasts as long as
its processes): each start is a fresh process, runs its share of the rounds after its own warm-up,
and the profiling hook runs once in each start. Real jobs: one-process workers on loopback."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import blockjobs  # noqa: E402

WORKER = textwrap.dedent(
    """
    import argparse, os
    from benchmarks.workers.serve import Task, add_arguments, serve

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    blocks = []

    def run():
        blocks.append(1)
        return 1.0

    serve(parser.parse_args(), 0, {"t": Task(run, extras=lambda: {"pid": os.getpid(), "block": len(blocks)})},
          lambda: None)
    """
)


@pytest.fixture
def specs(tmp_path: Path) -> dict[str, blockjobs.JobSpec]:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    return {name: blockjobs.JobSpec([sys.executable, str(worker)], env, 1) for name in ("raw", "accel")}


@pytest.mark.parametrize(("total", "count", "shares"), [(9, 3, [3, 3, 3]), (5, 3, [2, 2, 1]), (1, 1, [1])])
def test_a_total_is_shared_over_the_starts_the_first_ones_taking_the_rest(total, count, shares) -> None:
    assert [blockjobs.share(total, index, count) for index in range(count)] == shares


def test_rounds_run_in_fresh_starts_each_warmed_up_and_profiled(specs) -> None:
    starts_seen = []
    answers = blockjobs.interleaved_in_starts(
        specs, ["t"], rounds=5, warmup=1, starts=3,
        each_start=lambda jobs, index, count: starts_seen.append((sorted(jobs), index, count)),
    )  # fmt: skip
    for name in specs:
        pids = [answer["pid"] for answer in answers["t"][name]]
        assert len(pids) == 5
        assert pids[0] == pids[1] and pids[2] == pids[3] and len(set(pids)) == 3  # shares 2, 2, 1
        # Every start warms up (block 1) before its timed rounds (blocks 2, 3, ...).
        assert [answer["block"] for answer in answers["t"][name]] == [2, 3, 2, 3, 2]
    assert starts_seen == [(["accel", "raw"], index, 3) for index in range(3)]


def test_fewer_rounds_than_starts_start_the_jobs_once_a_round(specs) -> None:
    answers = blockjobs.interleaved_in_starts(specs, ["t"], rounds=2, warmup=0, starts=3)
    assert len({answer["pid"] for answer in answers["t"]["raw"]}) == 2
