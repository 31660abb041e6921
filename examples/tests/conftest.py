"""Each example runs briefly on 2 real CPU processes through `accel launch`; its test checks the metric.

Convention every example follows: on the main process its last line of stdout is one JSON object
with the final metrics (e.g. {"accuracy": 0.91, "f1": 0.9}); the `run_example` fixture returns it
parsed. (Tests are imported by path, so helpers reach them as fixtures, not imports.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from accel_launch.testing.ranks import launch_script

EXAMPLES = Path(__file__).resolve().parents[1]


def _run_example(
    name: str,
    script_args: Iterable[object] = (),
    *,
    num_processes: int = 2,
    launch_args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> dict[str, Any]:
    """Launch examples/`name` on `num_processes` CPU processes; return its final JSON metrics line."""
    result = launch_script(
        EXAMPLES / name,
        num_processes,
        script_args,
        launch_args=launch_args,
        env={"OMP_NUM_THREADS": "1", **(env or {})},
        timeout=timeout,
    )
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stderr[-4000:]}"
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{name} printed no JSON metrics line:\n{result.stdout[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture
def run_example() -> Callable[..., dict[str, Any]]:
    """`run_example(name, script_args, num_processes=2, launch_args=(), env=None, timeout=240)`."""
    return _run_example


@pytest.fixture(autouse=True)
def fresh_state() -> None:
    """The jobs inherit this process's environment as it was started (no per-test state to reset)."""


def _run_xla_example(
    name: str, script_args: Iterable[object] = (), *, num_processes: int = 1, timeout: float = 240
) -> dict[str, Any]:
    """Launch examples/`name` with `accel launch --xla` on XLA's CPU device (`num_processes`
    replicas, threads of one process); return its final JSON metrics line."""
    import os
    import subprocess
    import sys

    from accel_launch.testing.ranks import stop_job

    # The launcher sets the XLA variables itself; debug mode's extra exchanges would add graphs.
    drop = ("CPU_NUM_DEVICES", "ACCEL_DISTRIBUTED_TYPE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PJRT_DEVICE="CPU", OMP_NUM_THREADS="1", ACCEL_DEBUG_MODE="0")
    command = [
        sys.executable, "-m", "accel_launch.commands.cli", "launch", "--xla",
        "--num_processes", str(num_processes),
        str(EXAMPLES / name), *(str(arg) for arg in script_args),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr = stop_job(process)
        pytest.fail(f"{name} on XLA ran past {timeout:g} s and was killed:\n{stderr[-4000:]}")
    assert process.returncode == 0, f"{name} exited {process.returncode}:\n{stderr[-4000:]}"
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"{name} printed no JSON metrics line:\n{stdout[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture
def run_xla_example() -> Callable[..., dict[str, Any]]:
    """`run_xla_example(name, script_args, num_processes=1, timeout=240)`: through `accel launch --xla`."""
    return _run_xla_example
