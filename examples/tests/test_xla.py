"""examples/xla.py through `accel launch --xla` on XLA's CPU device: batches padded to fixed
lengths keep XLA to a few compiled graphs, and the model learns.

One replica: two replicas on the CPU device are threads of one process, and upstream PyTorch/XLA
hangs when both compile the same collective graph at once (pytorch/xla#9089); this script, which
does nothing to stagger them, hangs there in its first all-gather. Runs in the nox session
`engines(backend='xla')`.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "torch_xla", reason="torch_xla is not installed: this test runs in the nox session engines(backend='xla')"
)
pytestmark = pytest.mark.slow


def test_the_loop_runs_on_the_xla_device_with_few_compiled_graphs(run_xla_example):
    final = run_xla_example("xla.py", ["--epochs", "4", "--pad_to_multiple_of", "16"])
    assert (final["distributed_type"], final["device"], final["num_processes"]) == ("XLA", "xla", 1)
    assert final["padded_lengths"] and all(n % 16 == 0 for n in final["padded_lengths"]), final
    # 128 training steps and 8 evaluation batches, yet only a handful of graphs: shapes are static.
    assert 0 < final["compiled_graphs"] <= 20, final
    losses = final["epoch_losses"]
    assert losses == sorted(losses, reverse=True), losses
    assert final["eval_loss"] < final["initial_eval_loss"] / 4, final
    assert final["accuracy"] > 0.9, final
