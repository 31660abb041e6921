"""What save_state, load_state and save_model must never do: delete files no save wrote, break each
other's saves, half-apply a checkpoint, read outside its folder, or hide why a write failed."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import stat
import struct
import subprocess
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, set_seed
from accel.checkpointing import load_state, save_state
from accel.checkpointing.content_digest import content_digest
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.format import METADATA_NAME
from accel.checkpointing.registry import registry_of
from accel.checkpointing.weight_files import save_model
from accel.options.project_config import ProjectConfiguration
from accel.testing import Counter


def _setup(width=8):
    accelerator = Accelerator()
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    counter = Counter()
    registry_of(accelerator).register_for_checkpointing(counter)
    return accelerator, model, optimizer, scheduler, counter


def _train_step(accelerator, model, optimizer, scheduler, counter):
    loss = model(torch.randn(4, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    accelerator.step += 1
    counter.value += 1


def _live_state(accelerator, model, optimizer, scheduler, counter):
    """Return a digest of every object a load restores (weights, optimizer, RNGs, step, ...)."""
    return content_digest(
        {
            "weights": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": accelerator.step,
            "counter": counter.value,
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "numpy": torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
        }
    )


def _hidden(*folders):
    return [p.name for folder in folders for p in folder.iterdir() if p.name.startswith(".")]


# 1. A save replaces only what a save wrote ------------------------------------------------------------
def test_a_folder_that_is_not_a_checkpoint_is_refused_and_left_alone(tmp_path):
    acc, *_ = _setup()
    target = tmp_path / "out"
    (target / "final").mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    (target / "final" / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(CheckpointError, match=r"out holds files but is not an accel checkpoint"):
        save_state(acc, target)
    assert (target / "notes.txt").read_text() == "mine"
    assert (target / "final" / "model.safetensors").read_bytes() == b"weights"
    assert sorted(p.name for p in target.iterdir()) == ["final", "notes.txt"]
    assert _hidden(tmp_path) == []


def test_files_added_to_a_checkpoint_are_never_deleted(tmp_path):
    acc, *_ = _setup()
    acc.step = 1
    folder = Path(save_state(acc, tmp_path / "c"))
    (folder / "notes.txt").write_text("mine")
    acc.step = 2
    with pytest.raises(CheckpointError, match=r"c holds files its checkpoint did not write \(notes\.txt\)"):
        save_state(acc, folder)
    assert (folder / "notes.txt").read_text() == "mine" and _hidden(tmp_path) == []
    load_state(acc, folder)
    assert acc.step == 1  # the checkpoint there is untouched
    (folder / "notes.txt").unlink()
    acc.step = 3
    save_state(acc, folder)
    load_state(acc, folder)
    assert acc.step == 3 and _hidden(tmp_path) == []


def test_a_file_path_is_refused_and_the_file_kept(tmp_path):
    acc, *_ = _setup()
    target = tmp_path / "weights.pt"
    target.write_bytes(b"precious")
    with pytest.raises(CheckpointError, match=r"weights\.pt is a file, not a folder"):
        save_state(acc, target)
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.pt"]


def test_the_working_directory_and_its_parents_are_refused(tmp_path, monkeypatch):
    acc, *_ = _setup()
    work = tmp_path / "project" / "run"
    work.mkdir(parents=True)
    (work / "train.py").write_text("")
    monkeypatch.chdir(work)
    for target in (".", "", "..", tmp_path / "project", work):
        with pytest.raises(CheckpointError, match=r"it is the working directory or one of its parents"):
            save_state(acc, target)
    assert (work / "train.py").exists()
    assert _hidden(work, work.parent, tmp_path) == []


def test_an_empty_folder_is_used(tmp_path):
    acc, *_ = _setup()
    (tmp_path / "c").mkdir()
    acc.step = 4
    save_state(acc, tmp_path / "c")
    acc.step = 0
    load_state(acc, tmp_path / "c")
    assert acc.step == 4 and _hidden(tmp_path) == []


def test_a_folder_holding_only_empty_folders_is_used(tmp_path):
    # What a removal killed after its files and checkpoint.json went, before its folders, leaves.
    acc, *_ = _setup()
    (tmp_path / "c" / "model" / "shards").mkdir(parents=True)
    acc.step = 4
    save_state(acc, tmp_path / "c")
    acc.step = 0
    load_state(acc, tmp_path / "c")
    assert acc.step == 4 and not (tmp_path / "c" / "model" / "shards").exists() and _hidden(tmp_path) == []


def test_total_limit_keeps_a_checkpoint_holding_user_files(tmp_path):
    acc, *_ = _setup()
    acc.project_configuration = ProjectConfiguration(
        project_dir=tmp_path, automatic_checkpoint_naming=True, total_limit=1
    )
    save_state(acc)
    notes = tmp_path / "checkpoints" / "checkpoint_0" / "eval.txt"
    notes.write_text("keep")
    with pytest.warns(UserWarning, match=r"checkpoint_0 beyond total_limit=1"):
        save_state(acc)
    with pytest.warns(UserWarning, match=r"checkpoint_0 beyond total_limit=1"):
        save_state(acc)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint_0", "checkpoint_2"] and notes.read_text() == "keep"


def test_a_failed_rename_keeps_the_previous_checkpoint_and_leaves_nothing_hidden(tmp_path, monkeypatch):
    acc, *_ = _setup()
    acc.step = 1
    save_state(acc, tmp_path / "c")
    acc.step = 2
    rename = os.rename

    def cross_device(source, destination):
        if ".tmp-" in os.fspath(source):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        rename(source, destination)

    monkeypatch.setattr(os, "rename", cross_device)
    with pytest.raises(CheckpointError, match=r"^invalid cross-device link while renaming \.c\.tmp-\w+ to "):
        save_state(acc, tmp_path / "c")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    load_state(acc, tmp_path / "c")
    assert acc.step == 1


def test_save_model_removes_only_shards_it_wrote(tmp_path):
    acc = Accelerator()
    model = acc.prepare(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]))
    folder = tmp_path / "m"
    folder.mkdir()
    mine = {
        "model_final.safetensors": b"a",
        "model-best.safetensors": b"b",
        "model-00001-of-00009.safetensors": b"c",  # a shard name, but no index of save_model lists it
        "notes.txt": b"d",
    }
    for name, data in mine.items():
        (folder / name).write_bytes(data)
    save_model(acc, model, folder, max_shard_size=20_000)  # 4 shards
    assert len(list(folder.glob("model-*-of-00004.safetensors"))) == 4
    save_model(acc, model, folder, max_shard_size=40_000)  # 2 shards: the 4 go
    assert not list(folder.glob("model-*-of-00004.safetensors"))
    assert len(list(folder.glob("model-*-of-00002.safetensors"))) == 2
    save_model(acc, model, folder)  # one file: the 2 shards and the index go
    assert sorted(p.name for p in folder.iterdir()) == sorted([*mine, "model.safetensors"])
    assert all((folder / name).read_bytes() == data for name, data in mine.items())


# 2. Two writers of one folder -------------------------------------------------------------------------
def test_two_writers_and_a_reader_of_one_folder_take_turns(tmp_path):
    acc, *_ = _setup(width=256)
    reader, *_ = _setup(width=256)
    folder = tmp_path / "c"
    save_state(acc, folder)
    errors = []

    def repeat(function, *args):
        try:
            for _ in range(8):
                function(*args)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [
        threading.Thread(target=repeat, args=(save_state, acc, folder)),
        threading.Thread(target=repeat, args=(save_state, acc, folder)),
        threading.Thread(target=repeat, args=(load_state, reader, folder)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    load_state(reader, folder)


# 3. A load checks everything before it changes anything -----------------------------------------------
def _flip_a_byte(path):
    """Change one byte of what `path` holds, keeping it loadable where it can: in a torch file, the
    middle of its first tensor (else of its pickle), not the zip's padding."""
    data = bytearray(path.read_bytes())
    start, size = 0, len(data)
    if zipfile.is_zipfile(path):
        entries = zipfile.ZipFile(path).infolist()
        records = [i for i in entries if i.filename.endswith(("/data/0", "/data.pkl"))]
        entry = min(records, key=lambda i: i.filename.endswith("/data.pkl"))
        name_length, extra_length = struct.unpack(
            "<HH", data[entry.header_offset + 26 : entry.header_offset + 30]
        )
        start, size = entry.header_offset + 30 + name_length + extra_length, entry.file_size
    data[start + size // 2] ^= 0x20
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "name",
    [
        "optimizer.bin",
        "scheduler.bin",
        "custom_checkpoint_0.pt",
        "training_state.json",
        "random_states_0.safetensors",
    ],
)
def test_a_corrupt_file_is_reported_before_any_object_changes(tmp_path, name):
    objects = _setup()
    _train_step(*objects)
    folder = Path(save_state(objects[0], tmp_path / "c"))
    _train_step(*objects)
    random.random(), np.random.rand(), torch.rand(1)
    before = _live_state(*objects)
    _flip_a_byte(folder / name)
    with pytest.raises(CheckpointError, match=rf"/{name.replace('.', '[.]')} (is corrupt|cannot be loaded)"):
        load_state(objects[0], folder)
    assert _live_state(*objects) == before


@pytest.mark.parametrize("user_setting", [True, False])
def test_zip_checksums_are_skipped_only_in_a_checkpoint_and_torch_setting_is_kept(tmp_path, user_setting):
    """A checkpoint's torch files go without zip CRC32 (torch.load never reads them; the digests of
    checkpoint.json check every byte, as the corrupt-file cases above show); files for other tools
    (save_model's .bin) keep them, and torch's own setting is as the user left it."""
    torch.serialization.set_crc32_options(user_setting)
    try:
        objects = _setup()
        _train_step(*objects)
        folder = Path(save_state(objects[0], tmp_path / "c"))
        assert torch.serialization.get_crc32_options() is user_setting
        stored = [entry for entry in zipfile.ZipFile(folder / "optimizer.bin").infolist() if entry.file_size]
        assert stored and {entry.CRC for entry in stored} == {0}
        save_model(objects[0], objects[1], tmp_path / "m", safe_serialization=False)
        (weights,) = (tmp_path / "m").glob("*.bin")
        if user_setting:
            assert zipfile.ZipFile(weights).testzip() is None  # every record's CRC32 present and right
        assert torch.serialization.get_crc32_options() is user_setting
    finally:
        torch.serialization.set_crc32_options(True)


def test_an_optimizer_of_another_shape_is_refused_before_any_object_changes(tmp_path):
    objects = _setup()
    acc, model, optimizer, scheduler, counter = objects
    folder = save_state(acc, tmp_path / "c")
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    _train_step(*objects)
    before = _live_state(*objects)
    with pytest.raises(
        CheckpointError, match=r"optimizer\.bin does not fit the optimizer: it holds parameter groups"
    ):
        load_state(acc, folder)
    assert _live_state(*objects) == before


def _listing_outside_file(folder: Path, outside: Path, how: str) -> None:
    """Make checkpoint.json name a copy of model.safetensors outside `folder` (intact, so it loads)."""
    shutil.copy(folder / "model.safetensors", outside)
    metadata = json.loads((folder / METADATA_NAME).read_text())
    entry = metadata["files"].pop("model.safetensors")
    if how == "symlink":
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").symlink_to(outside)
        name = "model.safetensors"
    elif how == "linked_folder":  # a folder on the way is the link: `weights/model.safetensors`
        (folder / "model.safetensors").unlink()
        (folder / "weights").symlink_to(outside.parent)
        name = f"weights/{outside.name}"
    else:
        name = str(outside) if how == "absolute" else f"../{outside.name}"
    metadata["files"][name] = entry
    metadata["model_files"] = [name]
    (folder / METADATA_NAME).write_text(json.dumps(metadata))


@pytest.mark.parametrize("how", ["parent", "absolute", "symlink", "linked_folder"])
def test_files_outside_the_checkpoint_folder_are_refused(tmp_path, how):
    objects = _setup()
    folder = Path(save_state(objects[0], tmp_path / "c"))
    _listing_outside_file(folder, tmp_path / "outside.safetensors", how)
    _train_step(*objects)
    before = _live_state(*objects)
    with pytest.raises(CheckpointError, match=r"which (leaves|is a symbolic link that leads outside) the"):
        load_state(objects[0], folder)
    assert _live_state(*objects) == before


def test_a_symbolic_link_that_stays_inside_the_folder_loads(tmp_path):
    objects = _setup()
    folder = Path(save_state(objects[0], tmp_path / "c"))
    (folder / "weights").mkdir()
    (folder / "model.safetensors").rename(folder / "weights" / "model.safetensors")
    (folder / "model.safetensors").symlink_to(folder / "weights" / "model.safetensors")
    load_state(objects[0], folder)


# 4. Failed writes and file modes ----------------------------------------------------------------------
def test_a_full_disk_is_named_and_the_previous_checkpoint_survives(tmp_path, monkeypatch):
    acc, *_ = _setup()
    acc.step = 1
    save_state(acc, tmp_path / "c")
    acc.step = 2
    torch_save = torch.save

    def save_until_full(obj, f, *args, **kwargs):
        torch_save(obj, f, *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", save_until_full)
    with pytest.raises(CheckpointError, match=r"^no space left on device while writing \S+/optimizer\.bin$"):
        save_state(acc, tmp_path / "c")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    load_state(acc, tmp_path / "c")
    assert acc.step == 1


def test_a_full_disk_while_writing_safetensors_is_named(tmp_path, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    acc, model, *_ = _setup()
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(
        CheckpointError, match=r"^no space left on device while writing \S+/model\.safetensors$"
    ):
        save_state(acc, tmp_path / "c")
    with pytest.raises(
        CheckpointError, match=r"^no space left on device while writing \S+model\.safetensors"
    ):
        save_model(acc, model, tmp_path / "m")
    assert _hidden(tmp_path) == [] and list((tmp_path / "m").iterdir()) == []


@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.mark.parametrize("safe", [True, False])
def test_a_really_full_disk_is_named_and_the_previous_checkpoint_survives(small_filesystem, safe):
    objects = _setup(width=2048)  # 48 KiB of weights, 165 KiB with AdamW's state: one checkpoint fits
    _train_step(*objects)
    acc = objects[0]
    acc.step = 1
    save_state(acc, small_filesystem / "c", safe_serialization=safe)
    acc.step = 2
    with pytest.raises(
        CheckpointError, match=r"^no space left on device while writing \S+\.(safetensors|bin)$"
    ):
        save_state(acc, small_filesystem / "c", safe_serialization=safe)
    assert sorted(p.name for p in small_filesystem.iterdir()) == ["c"]
    load_state(acc, small_filesystem / "c")
    assert acc.step == 1


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_file_follows_the_umask(tmp_path, umask):
    acc, model, *_ = _setup()
    previous = os.umask(umask)
    try:
        save_state(acc, tmp_path / "c")
        save_model(acc, model, tmp_path / "one")
        save_model(acc, model, tmp_path / "shards", max_shard_size=100)
    finally:
        os.umask(previous)
    modes = {
        p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*.*")
    }
    assert "c/model.safetensors" in modes and "shards/model.safetensors.index.json" in modes
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)
