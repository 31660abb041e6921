"""examples/deepspeed_zero3.py on 2 CPU processes (DeepSpeed's CPU accelerator): ZeRO-3 shards the
parameters over both ranks, the loss falls, the saved weights are the whole model, and the output
holds none of the deprecation warnings DeepSpeed's own calls raise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel_launch.testing.ranks import launch_script

pytest.importorskip(
    "deepspeed", reason="DeepSpeed is not installed: it runs in the nox session engines(backend='deepspeed')"
)
pytestmark = pytest.mark.slow


EXAMPLE = Path(__file__).resolve().parents[1] / "deepspeed_zero3.py"


def test_zero3_trains_sharded_and_saves_the_consolidated_weights(tmp_path):
    from safetensors.torch import load_file

    result = launch_script(
        EXAMPLE, 2, ["--output_dir", tmp_path, "--epochs", "3"], env={"OMP_NUM_THREADS": "1"}, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    output = (result.stdout + result.stderr).splitlines()
    deprecations = [line for line in output if "FutureWarning" in line or "DeprecationWarning" in line]
    assert not deprecations, f"{len(deprecations)} deprecation warnings, e.g. {deprecations[:3]}"
    final = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert final["zero_stage"] == 3
    losses = final["epoch_losses"]
    assert losses == sorted(losses, reverse=True), losses
    assert final["eval_loss"] < final["initial_eval_loss"] / 10, final
    assert final["accuracy"] > 0.9, final
    # Each rank holds half of every parameter (padded to an even split), not the whole model.
    per_rank = final["partitioned_params_per_rank"]
    assert len(per_rank) == 2 and all(n < final["total_params"] for n in per_rank), final
    assert sum(per_rank) >= final["total_params"], final
    weights = load_file(tmp_path / "model.safetensors")
    assert sum(t.numel() for t in weights.values()) == final["total_params"]
    assert weights["0.weight"].shape == (256, 16) and weights["4.weight"].shape == (4, 256)
    assert all(t.isfinite().all() for t in weights.values())
