"""Integration tests launch real jobs through `accel launch`; these fixtures say where things are."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from accel_launch.testing.ranks import launch_script

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """Keep the environment as the session was started (replaces the accel_state.testing plugin's
    fixture of that name here): the jobs these tests launch inherit it, ACCEL_DEBUG_MODE included."""
    yield


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def example_script() -> Path:
    return REPO_ROOT / "examples" / "train_regression.py"


@pytest.fixture
def check_no_gloo_thread_left() -> Callable[[str, Iterable[str], Mapping[str, str]], None]:
    """`check(held, launch_args, env)`: run jobs/threads_at_exit.py on 2 processes and assert that
    no rank still runs a gloo thread after accel's exit teardown (such threads can abort a rank
    with SIGABRT as the interpreter ends)."""

    def check(held: str, launch_args: Iterable[str] = (), env: Mapping[str, str] | None = None) -> None:
        job = REPO_ROOT / "integration-tests" / "jobs" / "threads_at_exit.py"
        result = launch_script(job, 2, [held], launch_args=launch_args, env=env, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        lines = [line for line in result.stdout.splitlines() if line.startswith("THREADS ")]
        reports = [json.loads(line.removeprefix("THREADS ")) for line in lines]
        assert sorted(report["rank"] for report in reports) == ["0", "1"], result.stdout
        for report in reports:
            gloo = [name for name in report["names"] if "gloo" in name]
            held = report.get("group_holders")
            assert not gloo, f"rank {report['rank']} still runs {gloo} after the teardown; held by {held}"

    return check


@pytest.fixture
def stall_between_steps() -> tuple[Path, dict[str, int]]:
    """jobs/stall_between_steps.py, and the lines the diagnosis names: where rank 1 stalls, and the
    forward, backward and optimizer step rank 0 may wait in."""
    job = REPO_ROOT / "integration-tests" / "jobs" / "stall_between_steps.py"
    code = {
        "stall": "time.sleep(300)",
        "forward": "loss = model(",
        "backward": "accelerator.backward(loss)",
        "step": "optimizer.step()",
    }
    text = job.read_text().splitlines()
    return job, {
        name: next(i for i, line in enumerate(text, 1) if snippet in line) for name, snippet in code.items()
    }
