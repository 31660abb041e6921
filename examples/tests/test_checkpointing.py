"""examples/checkpointing.py on 2 processes: a run stopped part way and resumed from its latest
checkpoint ends with exactly the weights and losses of an uninterrupted run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

# 1024 samples, 16 per process on 2 processes: 32 steps an epoch, 96 in all. Stopped after 45
# steps, the newest checkpoint is the one of step 40, in the middle of the second epoch.
ARGS = ["--epochs", "3", "--checkpointing_steps", "10", "--total_limit", "2"]


def test_a_resumed_run_ends_bit_exactly_where_an_uninterrupted_run_ends(run_example, tmp_path):
    whole = run_example("checkpointing.py", [*ARGS, "--output_dir", tmp_path / "whole"])
    stopped_dir = tmp_path / "stopped"
    stopped = run_example(
        "checkpointing.py", [*ARGS, "--output_dir", stopped_dir, "--stop_after_steps", "45"]
    )
    kept = sorted(p.name for p in (stopped_dir / "checkpoints").iterdir())
    resumed = run_example(
        "checkpointing.py", [*ARGS, "--output_dir", stopped_dir, "--resume_from_checkpoint", "latest"]
    )

    assert (whole["completed_steps"], whole["resumed_at"], whole["stopped"]) == (96, 0, False)
    assert (stopped["completed_steps"], stopped["stopped"]) == (45, True)
    assert kept == ["checkpoint_2", "checkpoint_3"]  # saves at steps 10..40, the newest 2 kept
    assert (resumed["resumed_at"], resumed["completed_steps"]) == (40, 96)
    assert stopped["weights_sha256"] != whole["weights_sha256"]
    for key in ("weights_sha256", "last_loss", "eval_loss", "accuracy"):
        assert resumed[key] == whole[key], key  # at tolerance 0
    assert whole["accuracy"] > 0.8, whole
    assert whole["eval_loss"] < 0.5, whole
