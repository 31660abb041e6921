"""The memory budget holds: a 192 MiB model run with 48 MiB of CPU budget and the rest on disk.

Runs `budget_scenario.py` in fresh processes (one writes the checkpoint, one loads and runs it) and
reads RssAnon from /proc/self/status there: disk weights are memory-mapped, so anonymous memory grows
by about the CPU budget, far below the model's size (Accelerate 1.15 grows by ~230 MiB here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("budget_scenario.py")


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCENARIO), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="RssAnon is read from Linux's /proc")
def test_load_and_forward_stay_within_the_budget_in_a_fresh_process(tmp_path: Path) -> None:
    _run("prepare", str(tmp_path))
    result = json.loads(_run("measure", str(tmp_path), "accel").strip().splitlines()[-1])
    assert result["equal"], "offloaded output differs from the full model's"
    assert result["disk_entries"] > 30 and result["cpu_entries"] >= 8, result
    assert result["growth_mib"] < 0.6 * result["model_mib"], result
