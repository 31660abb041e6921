"""examples/tracking.py on 2 processes: the JSON-lines file and the TensorBoard event file hold
every logged step with the values the run reported, written once (by the main process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# 1024 samples, 16 per process on 2 processes: 32 steps an epoch, 96 in all.
ARGS = ["--epochs", "3", "--logging_steps", "5"]
TRAIN_STEPS = list(range(5, 97, 5))
EVAL_STEPS = [32, 64, 96]


def _jsonl(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _check_jsonl(run_dir: Path, final: dict) -> list[dict]:
    records = _jsonl(run_dir)
    assert len(records) == final["log_calls"] == len(TRAIN_STEPS) + len(EVAL_STEPS)
    train = [r for r in records if "train_loss" in r["values"]]
    evals = [r for r in records if "eval_loss" in r["values"]]
    assert [r["step"] for r in train] == TRAIN_STEPS
    assert [r["step"] for r in evals] == EVAL_STEPS
    assert [r["values"]["epoch"] for r in evals] == [0, 1, 2]
    assert evals[-1]["values"]["accuracy"] == final["accuracy"]
    assert evals[-1]["values"]["eval_loss"] == final["eval_loss"]
    losses = [r["values"]["train_loss"] for r in train]
    assert losses[-1] < losses[0] / 3, losses
    rates = [r["values"]["lr"] for r in train]
    assert rates == sorted(rates, reverse=True) and rates[-1] < rates[0], rates  # cosine decay
    assert final["accuracy"] > 0.9, final
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert config["logging_steps"] == 5 and config["epochs"] == 3
    return records


def test_the_jsonl_file_holds_every_logged_step(run_example, tmp_path):
    final = run_example("tracking.py", [*ARGS, "--output_dir", tmp_path, "--report_to", "jsonl"])
    run_dir = tmp_path / "tracking"
    assert Path(final["run_dir"]) == run_dir
    _check_jsonl(run_dir, final)
    assert not list(run_dir.rglob("events.out.tfevents.*"))  # only the trackers asked for


def test_tensorboard_and_jsonl_log_the_same_values(run_example, tmp_path):
    pytest.importorskip("tensorboard", reason="the TensorBoard tracker needs `pip install tensorboard`")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    final = run_example("tracking.py", [*ARGS, "--output_dir", tmp_path, "--run_name", "both"])
    run_dir = tmp_path / "both"
    records = _check_jsonl(run_dir, final)
    events = list(run_dir.glob("events.out.tfevents.*"))
    assert len(events) == 1, events  # one writer: the main process's
    scalars = EventAccumulator(str(run_dir))
    scalars.Reload()
    assert set(scalars.Tags()["scalars"]) == {"train_loss", "lr", "eval_loss", "accuracy", "epoch"}
    for tag in ("train_loss", "eval_loss", "accuracy"):
        logged = {r["step"]: r["values"][tag] for r in records if tag in r["values"]}
        seen = {event.step: event.value for event in scalars.Scalars(tag)}
        assert seen.keys() == logged.keys(), tag
        for step, value in logged.items():  # TensorBoard keeps float32
            assert seen[step] == pytest.approx(value, rel=1e-6), (tag, step)
