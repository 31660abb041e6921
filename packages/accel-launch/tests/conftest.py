"""Fixtures shared by the tests that launch real jobs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory, monkeypatch):
    """Keep the user's own config file (and a config named by env) out of every test."""
    monkeypatch.setenv("ACCEL_HOME", str(tmp_path_factory.mktemp("accel-home")))
    # Options the test session itself may carry (nox sets ACCEL_DEBUG_MODE) would beat the defaults.
    for name in list(os.environ):
        if name.startswith("ACCEL_") and name != "ACCEL_HOME":
            monkeypatch.delenv(name)


@pytest.fixture
def script(tmp_path) -> str:
    """A script that only prints: what the launch tests hand `accel launch`."""
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _is_running(pid: int) -> bool:
    """Return True when `pid` is a live process (a zombie waiting to be reaped counts as gone)."""
    if Path("/proc").is_dir():
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return text[text.rfind(")") + 2] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def running_pids() -> Callable[[Path], list[int]]:
    """Return a function listing which pids written as `pid_<rank>` files in a folder still run."""

    def running(folder: Path) -> list[int]:
        pids = [int(path.read_text()) for path in sorted(folder.glob("pid_*"))]
        assert pids, f"no worker wrote its pid into {folder}"
        return [pid for pid in pids if _is_running(pid)]

    return running


@pytest.fixture
def launched(monkeypatch):
    """Record what would be handed to torch.distributed.run instead of running it."""
    from accel_launch.launch import runner

    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(argv, env, *, debug=False):
        calls.append((list(argv), dict(env)))
        return 0

    monkeypatch.setattr(runner, "run_torchrun", fake_run)
    return calls
