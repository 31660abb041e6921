"""examples/nd_parallel.py on 4 CPU processes: the mesh from the launcher's flags or from the
script's own ParallelismConfig, each rank holding a part of the model, the task learned exactly."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

LAUNCH_FLAGS = [
    "--use_parallelism_config",
    "--parallelism_config_dp_shard_size", "2",
    "--parallelism_config_tp_size", "2",
]  # fmt: skip


def _check(final: dict, tmp_path) -> None:
    from safetensors.torch import load_file

    assert final["distributed_type"] == "FSDP"
    assert final["accuracy"] > 0.95, final
    assert final["eval_tokens"] == 128 * 12, "every evaluation token counted once"
    losses = final["epoch_losses"]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] / 4, losses
    weights = load_file(final["weights"])
    assert sum(t.numel() for t in weights.values()) == final["total_params"]
    assert weights["layers.0.attention.q_proj.weight"].shape == (64, 64)
    assert all(n < final["total_params"] for n in final["local_params_per_rank"]), final


def test_the_launchers_flags_give_the_mesh(run_example, tmp_path):
    final = run_example(
        "nd_parallel.py", ["--output_dir", tmp_path], num_processes=4, launch_args=LAUNCH_FLAGS, timeout=400
    )
    assert final["mesh"] == {"dp_replicate": 1, "dp_shard": 2, "cp": 1, "tp": 2}
    _check(final, tmp_path)


def test_the_scripts_config_gives_replicas_of_a_tensor_parallel_model(run_example, tmp_path):
    args = ["--output_dir", tmp_path, "--dp_replicate_size", "2", "--tp_size", "2", "--epochs", "3"]
    final = run_example("nd_parallel.py", args, num_processes=4, timeout=400)
    assert final["mesh"] == {"dp_replicate": 2, "dp_shard": 1, "cp": 1, "tp": 2}
    _check(final, tmp_path)
