"""Trackers on 2 real ranks: only the main process creates and writes the tracker files."""

from __future__ import annotations

import importlib.util
import json

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def log_from_every_rank(project_dir, log_with):
    from accel import Accelerator

    accelerator = Accelerator(log_with=log_with, project_dir=project_dir)
    accelerator.init_trackers("run", config={"lr": 0.1})
    for step in range(3):
        accelerator.log({"rank": accelerator.process_index, "loss": 1.0 / (step + 1)}, step=step)
    names = [tracker.name for tracker in accelerator.trackers]
    blank = type(accelerator.get_tracker("jsonl")).__name__
    accelerator.end_training()
    return {"rank": accelerator.process_index, "trackers": names, "jsonl_tracker": blank}


def test_only_rank_0_writes_the_jsonl_file_launch(tmp_path):
    first, second = run_on_ranks(log_from_every_rank, 2, str(tmp_path), "jsonl", timeout=120)
    assert first["trackers"] == ["jsonl"] and second["trackers"] == []
    assert (first["jsonl_tracker"], second["jsonl_tracker"]) == ("JSONLinesTracker", "GeneralTracker")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert {line["values"]["rank"] for line in lines} == {0}
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 0.1}


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_only_rank_0_writes_tensorboard_events_launch(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first, second = run_on_ranks(log_from_every_rank, 2, str(tmp_path), ["tensorboard", "jsonl"], timeout=120)
    assert first["trackers"] == ["tensorboard", "jsonl"] and second["trackers"] == []
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert [event.value for event in events.Scalars("rank")] == [0.0, 0.0, 0.0]
    assert len(list((tmp_path / "run").glob("events.out.tfevents.*"))) == 1  # one writer: rank 0's
