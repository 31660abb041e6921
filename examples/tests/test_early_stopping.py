"""examples/early_stopping.py on 2 processes: the ranks whose own validation loss stopped improving
raise the trigger, and every rank leaves the loop at that same epoch, well before the last."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow


def test_every_rank_stops_at_the_epoch_the_first_rank_raised_the_trigger(run_example):
    patience = 3
    final = run_example("early_stopping.py", ["--patience", patience, "--max_epochs", 100])
    stops, bests = final["stopped_epoch"], final["best_epoch"]
    assert len(stops) == 2 and stops[0] == stops[1], final  # the same epoch on every rank
    stop = stops[0]
    assert stop < final["max_epochs"] - 1, final  # stopped early, not at the end
    assert final["raised_by"], final
    for rank in range(2):
        waited = stop - bests[rank]  # epochs without improvement on that rank when all stopped
        if rank in final["raised_by"]:
            assert waited == patience, (rank, final)
        else:
            assert waited < patience, (rank, final)
    # It learned before it overfitted: better than chance (ln 2) on every rank's shard.
    assert all(loss < math.log(2) - 0.05 for loss in final["best_eval_loss"]), final
