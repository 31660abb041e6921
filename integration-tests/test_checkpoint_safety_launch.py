"""Checkpoint safety across real processes: a corrupt file of one rank, a full disk on one rank,
ranks naming different folders, and two independent jobs saving into one folder.

Also a script: `python test_checkpoint_safety_launch.py save-loop DIR COUNT` (one of those jobs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

THIS_FILE = Path(__file__).resolve()


def _build(timeout=None):
    import torch

    from accel import Accelerator, set_seed

    accelerator = Accelerator(timeout=timeout)
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _train_step(accelerator, model, optimizer):
    import torch

    accelerator.backward(model(torch.randn(4, 4)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()


def _digest(model, optimizer):
    import torch

    from accel.checkpointing.content_digest import content_digest

    return content_digest([model.state_dict(), optimizer.state_dict(), torch.get_rng_state()])


def load_with_rank_one_corrupt(folder):
    """Save, train on, corrupt rank 1's random states; return (load error, whether nothing changed)."""
    from accel.checkpointing.errors import CheckpointError

    accelerator, model, optimizer = _build()
    _train_step(accelerator, model, optimizer)
    accelerator.save_state(folder)
    _train_step(accelerator, model, optimizer)
    before = _digest(model, optimizer)
    if accelerator.is_main_process:
        path = Path(folder) / "random_states_1.safetensors"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01  # in the generators' words: it still loads, and differs
        path.write_bytes(bytes(data))
    accelerator.wait_for_everyone()
    try:
        accelerator.load_state(folder)
        error = None
    except CheckpointError as caught:
        error = str(caught)
    return error, _digest(model, optimizer) == before


def test_a_corrupt_file_of_one_rank_changes_nothing_on_any_rank_launch(tmp_path):
    results = run_on_ranks(load_with_rank_one_corrupt, 2, str(tmp_path / "c"))
    (error_0, unchanged_0), (error_1, unchanged_1) = results
    assert error_1 is not None and "random_states_1.safetensors is corrupt" in error_1
    assert error_0 is not None and error_0.startswith("load_state failed on rank 1: ")
    assert "random_states_1.safetensors is corrupt" in error_0
    assert unchanged_0 and unchanged_1


def save_with_a_full_disk_on_rank_one(folder):
    """Save once, then again with rank 1's disk full; return (error, seconds, step loaded afterwards)."""
    import safetensors.torch

    from accel.checkpointing.errors import CheckpointError

    accelerator, model, optimizer = _build(timeout=20)
    accelerator.step = 1
    accelerator.save_state(folder)
    accelerator.step = 2
    save_file = safetensors.torch.save_file

    def full(tensors, filename, *args, **kwargs):
        # Rank 1 writes only its random states: the disk fills while they are written, as
        # safetensors reports it.
        save_file(tensors, filename, *args, **kwargs)
        raise safetensors.SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    if accelerator.process_index == 1:
        safetensors.torch.save_file = full
    started = time.monotonic()
    try:
        accelerator.save_state(folder)
        error = None
    except CheckpointError as caught:
        error = str(caught)
    seconds = time.monotonic() - started
    safetensors.torch.save_file = save_file
    accelerator.wait_for_everyone()
    accelerator.load_state(folder)
    return error, seconds, accelerator.step


def test_a_full_disk_on_one_rank_fails_every_rank_at_once_launch(tmp_path):
    results = run_on_ranks(save_with_a_full_disk_on_rank_one, 2, str(tmp_path / "c"))
    (error_0, seconds_0, step_0), (error_1, seconds_1, step_1) = results
    assert error_1 is not None
    assert error_1.startswith("no space left on device while writing ")
    assert error_1.endswith("random_states_1.safetensors")
    assert error_0 == f"save_state failed on rank 1: {error_1}"
    assert seconds_0 < 15 and seconds_1 < 15  # not after the 20 s collective timeout
    assert step_0 == step_1 == 1  # the previous checkpoint survived
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def each_rank_its_own_folder(root):
    """Save, then load, each rank naming its own folder; return (save error, load error, files)."""
    from accel.checkpointing.errors import CheckpointError

    accelerator, model, optimizer = _build(timeout=60)
    rank = accelerator.process_index
    errors = []
    for operation, folder in (("save_state", "a" if rank == 0 else "b"), ("load_state", f"c{rank}")):
        try:
            getattr(accelerator, operation)(str(Path(root) / folder))
            errors.append(None)
        except CheckpointError as caught:
            errors.append(str(caught))
    accelerator.wait_for_everyone()
    return errors[0], errors[1], sorted(p.name for p in Path(root).iterdir())


def test_ranks_naming_different_folders_fail_on_every_rank_launch(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    for rank in (0, 1):  # two complete checkpoints: each rank would load another one
        run_on_ranks(save_one_checkpoint, 2, str(root / f"c{rank}"))
    results = run_on_ranks(each_rank_its_own_folder, 2, str(root))
    expected_save = (
        f"save_state: ranks disagree on the folder: rank 0 '{root / 'a'}', rank 1 '{root / 'b'}'; "
        "every rank must pass the same folder"
    )
    expected_load = (
        f"load_state: ranks disagree on the folder: rank 0 '{root / 'c0'}', rank 1 '{root / 'c1'}'; "
        "every rank must pass the same folder"
    )
    for save_error, load_error, files in results:
        assert save_error == expected_save
        assert load_error == expected_load
        assert files == ["c0", "c1"]  # nothing was written for the refused save


def save_one_checkpoint(folder):
    accelerator, model, optimizer = _build()
    accelerator.save_state(folder)


def save_loop(folder, count):
    """Save `count` checkpoints into `folder`, each loaded back at once (a job of its own)."""
    accelerator, model, optimizer = _build()
    for step in range(count):
        accelerator.step = step
        accelerator.save_state(folder)
        accelerator.load_state(folder)


def test_two_jobs_saving_into_one_folder_take_turns_launch(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "RANK", "WORLD_SIZE", "LOCAL_"))
    }
    folder = tmp_path / "c"
    jobs = [
        subprocess.Popen(
            [sys.executable, str(THIS_FILE), "save-loop", str(folder), "25"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [job.communicate(timeout=180) for job in jobs]
    for job, (_, stderr) in zip(jobs, outputs, strict=True):
        assert job.returncode == 0, stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


if __name__ == "__main__":
    if sys.argv[1] == "save-loop":
        save_loop(sys.argv[2], int(sys.argv[3]))
