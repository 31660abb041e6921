"""Rotation of automatically named checkpoints (`total_limit`): it never deletes the checkpoint just
written, nor one numbered after it, nor anything that is not an accel checkpoint holding only its own
files; it names each folder it deletes (log) and each one it keeps beyond the limit (warning)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch

from accel import Accelerator
from accel.checkpointing import load_state
from accel.checkpointing.errors import CheckpointError
from accel.options.project_config import ProjectConfiguration


def _accelerator(project: Path, total_limit: int, iteration: int = 0) -> Accelerator:
    accelerator = Accelerator()
    accelerator.project_configuration = ProjectConfiguration(
        project_dir=project, automatic_checkpoint_naming=True, total_limit=total_limit, iteration=iteration
    )
    model = torch.nn.Linear(4, 2)
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return accelerator


def _names(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "checkpoints").iterdir())


def test_an_older_runs_later_number_never_makes_a_save_delete_itself(tmp_path, caplog):
    """The issue's case: an older run left checkpoint_9; this run saves checkpoint_0, then _1."""
    _accelerator(tmp_path, total_limit=1, iteration=9).save_state()
    accelerator = _accelerator(tmp_path, total_limit=1)
    caplog.set_level(logging.INFO, logger="accel.checkpointing.naming")
    with pytest.warns(UserWarning, match=r"kept checkpoint_9 under .* beyond total_limit=1: numbered after"):
        first = accelerator.save_state()
    assert Path(first).name == "checkpoint_0" and Path(first, "checkpoint.json").is_file()
    with pytest.warns(
        UserWarning, match=r"load_state\(\) without a folder loads checkpoint_9, not checkpoint_1"
    ):
        second = accelerator.save_state()
    assert Path(second).name == "checkpoint_1" and Path(second, "checkpoint.json").is_file()
    assert _names(tmp_path) == ["checkpoint_1", "checkpoint_9"]
    removed = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
    assert removed == [f"save_state: removed {Path(first)} (total_limit=1)"]


def test_rotation_keeps_the_newest_and_names_each_removed(tmp_path, caplog):
    accelerator = _accelerator(tmp_path, total_limit=2)
    caplog.set_level(logging.INFO, logger="accel.checkpointing.naming")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unusual here: no warning
        saved = [accelerator.save_state() for _ in range(4)]
    assert _names(tmp_path) == ["checkpoint_2", "checkpoint_3"]
    removed = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
    assert removed == [f"save_state: removed {saved[i]} (total_limit=2)" for i in (0, 1)]
    assert Path(load_state(accelerator)).name == "checkpoint_3"


def test_a_project_folder_holding_other_things_keeps_them_all(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "notes.txt").write_text("mine")
    (checkpoints / "checkpoint_1").mkdir()  # not an accel checkpoint: another tool's folder
    (checkpoints / "checkpoint_1" / "weights.pt").write_text("theirs")
    (checkpoints / "checkpoint_2").write_text("a file")  # a file of our naming
    (checkpoints / "checkpoint-500").mkdir()  # the Trainer's naming
    (checkpoints / "checkpoint-500" / "model.safetensors").write_text("theirs")
    older = _accelerator(tmp_path, total_limit=1, iteration=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        older.save_state()
    Path(checkpoints / "checkpoint_3" / "eval.txt").write_text("added by the user")
    accelerator = _accelerator(tmp_path, total_limit=1, iteration=4)
    with pytest.warns(UserWarning) as caught:
        accelerator.save_state()
        accelerator.save_state()
    messages = [str(w.message) for w in caught]
    assert any(
        "kept " + str(checkpoints / "checkpoint_1") + " beyond total_limit=1: it is not an accel checkpoint"
        in m
        for m in messages
    )
    assert any(
        "kept "
        + str(checkpoints / "checkpoint_3")
        + " beyond total_limit=1: it holds files its checkpoint did "
        "not write (eval.txt)" in m
        for m in messages
    )
    assert not any("checkpoint_2 " in m or "checkpoint-500" in m for m in messages)  # not ours: not named
    assert _names(tmp_path) == [
        "checkpoint-500", "checkpoint_1", "checkpoint_2", "checkpoint_3", "checkpoint_5", "notes.txt",
    ]  # fmt: skip
    assert (checkpoints / "checkpoint_1" / "weights.pt").read_text() == "theirs"
    assert (checkpoints / "checkpoint_2").read_text() == "a file"
    assert Path(load_state(accelerator)).name == "checkpoint_5"


def test_load_state_without_a_folder_skips_folders_no_save_wrote(tmp_path):
    accelerator = _accelerator(tmp_path, total_limit=2)
    saved = accelerator.save_state()
    (tmp_path / "checkpoints" / "checkpoint_7").mkdir()  # another tool's, of our naming
    (tmp_path / "checkpoints" / "checkpoint_7" / "notes.txt").write_text("theirs")
    (tmp_path / "checkpoints" / "checkpoint_8").write_text("a file")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither is a checkpoint load_state() would pick: no warning
        accelerator.save_state()
    assert load_state(accelerator) == str(Path(saved).with_name("checkpoint_1"))
    for name in ("checkpoint_0", "checkpoint_1"):
        for path in sorted((tmp_path / "checkpoints" / name).iterdir()):
            path.unlink()
        (tmp_path / "checkpoints" / name).rmdir()
    with pytest.raises(
        CheckpointError, match=r"no accel checkpoint_<n> folder under .* \(only checkpoint_7, which hold"
    ):
        load_state(accelerator)
