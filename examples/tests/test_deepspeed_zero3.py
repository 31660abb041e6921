"""examples/deepspeed_zero3.py on 2 CPU processes (DeepSpeed's CPU accelerator): ZeRO-3 shards the
parameters over both ranks, the loss falls, and the saved weights are the whole model."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed: this test runs in `nox -s deepspeed`")
pytestmark = pytest.mark.slow


def test_zero3_trains_sharded_and_saves_the_consolidated_weights(run_example, tmp_path):
    from safetensors.torch import load_file

    final = run_example("deepspeed_zero3.py", ["--output_dir", tmp_path, "--epochs", "3"], timeout=300)
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
