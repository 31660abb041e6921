"""examples/ray_train.py as a user runs it: `python examples/ray_train.py` starts its own local Ray
cluster, trains on 2 CPU workers and prints its final loss; run again under the same name with more
epochs, it resumes from Ray's latest checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "ray.train.torch", reason="Ray runs in the nox session ray (`nox -s ray`), which installs ray[train]"
)

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_train.py"


def run_example(*args: object, timeout: float = 600) -> tuple[dict[str, Any], str]:
    """Run the example with `args`; return its final JSON line, parsed, and its whole output."""
    # The environment of this session reaches the example's cluster: the loopback setting of conftest.py.
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *(str(arg) for arg in args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line:\n{result.stdout[-2000:]}"
    return json.loads(lines[-1]), output


def test_example_trains_then_resumes_from_rays_checkpoint(tmp_path):
    common = ("--storage", tmp_path / "storage", "--name", "example")
    first, _ = run_example(*common, "--epochs", 2)
    assert first["epoch"] == 1 and first["loss"] < 1.0, first
    assert Path(first["checkpoint"], "checkpoint.json").is_file(), first

    resumed, output = run_example(*common, "--epochs", 3)
    assert "resumed from Ray's checkpoint at epoch 2" in output, output[-4000:]
    assert resumed["epoch"] == 2 and resumed["loss"] < first["loss"], (first, resumed)
