"""examples/fsdp.py on 2 CPU processes: FSDP2 shards the model as the wrap policy says, the loss
falls, and the main process saves the full weights."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def _check_trained_and_saved(final: dict) -> None:
    from safetensors.torch import load_file

    assert final["distributed_type"] == "FSDP"
    losses = final["epoch_losses"]
    assert losses == sorted(losses, reverse=True), losses
    assert losses[-1] < final["initial_eval_loss"] / 4, final
    # Every parameter is split over the 2 ranks: each holds a part, together the whole.
    per_rank = final["local_params_per_rank"]
    assert len(per_rank) == 2 and sum(per_rank) == final["total_params"], final
    assert all(0 < n < final["total_params"] for n in per_rank), final
    weights = load_file(final["weights"])
    assert sum(t.numel() for t in weights.values()) == final["total_params"]
    assert weights["tokens.weight"].shape == (32, 64)
    assert weights["layers.1.linear1.weight"].shape == (128, 64)


def test_transformer_based_wrap_shards_each_layer_and_learns(run_example, tmp_path):
    final = run_example("fsdp.py", ["--output_dir", tmp_path, "--epochs", "3"])
    assert final["sharded_modules"] == ["<root>", "layers.0", "layers.1"]
    assert final["accuracy"] > 0.9, final
    _check_trained_and_saved(final)


def test_size_based_wrap_shards_the_modules_above_the_threshold(run_example, tmp_path):
    # An encoder layer holds 33,472 parameters, its attention block 16,640, its largest linear 8,320.
    args = ["--output_dir", tmp_path, "--wrap", "size", "--min_num_params", "10000", "--epochs", "2"]
    final = run_example("fsdp.py", args)
    layers = [[f"layers.{i}", f"layers.{i}.self_attn"] for i in range(2)]
    assert final["sharded_modules"] == ["<root>", *layers[0], *layers[1]]
    _check_trained_and_saved(final)
