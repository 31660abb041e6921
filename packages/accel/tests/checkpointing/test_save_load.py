"""save_state/load_state, ProjectConfiguration, pre-hooks and save_model on one process."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, set_seed
from accel.checkpointing import load_state, rng, save_state
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.folder import recover_folder
from accel.checkpointing.format import METADATA_NAME
from accel.checkpointing.naming import list_checkpoints
from accel.checkpointing.reader import _load_safetensors
from accel.checkpointing.registry import registry_of
from accel.checkpointing.weight_files import parse_size, save_model
from accel.options.project_config import ProjectConfiguration
from accel.testing import Counter, train_steps


def _setup(mixed_precision="no", project=None, accumulation=1):
    accelerator = Accelerator(mixed_precision=mixed_precision, gradient_accumulation_steps=accumulation)
    if project is not None:
        accelerator.project_configuration = project
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(40, 4, generator=generator), torch.randn(40, 1, generator=generator))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    counter = Counter()
    registry_of(accelerator).register_for_checkpointing(counter)
    return accelerator, model, optimizer, scheduler, loader, counter


def _train(accelerator, model, optimizer, scheduler, batches, counter):
    train_steps(accelerator, model, optimizer, batches, scheduler=scheduler)
    counter.value += len(batches)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("mixed_precision, accumulation", [("no", 1), ("fp16", 2)])
def test_round_trip_resumes_exactly(tmp_path, safe, mixed_precision, accumulation):
    acc, model, opt, sched, loader, counter = _setup(mixed_precision, accumulation=accumulation)
    batches = list(loader)
    # Saved at an optimizer step: gradients being accumulated are not part of a checkpoint.
    _train(acc, model, opt, sched, batches[:4], counter)
    save_state(acc, tmp_path / "ckpt", safe_serialization=safe)
    saved_scaler = None if acc.scaler is None else acc.scaler.state_dict()
    _train(acc, model, opt, sched, batches[4:], counter)
    expected = _weights(model)

    acc2, model2, opt2, sched2, loader2, counter2 = _setup(mixed_precision, accumulation=accumulation)
    untouched_scaler = None if acc2.scaler is None else acc2.scaler.state_dict()
    load_state(acc2, tmp_path / "ckpt")
    assert counter2.value == 4 and acc2.step == 4
    if acc.scaler is not None:
        assert saved_scaler != untouched_scaler  # the steps before the save changed the scaler
        assert acc2.scaler.state_dict() == saved_scaler
    _train(acc2, model2, opt2, sched2, batches[4:], counter2)
    for name, tensor in _weights(model2).items():
        assert torch.equal(tensor, expected[name]), name
    assert sched2.state_dict() == sched.state_dict()


def test_files_and_metadata(tmp_path):
    acc, model, opt, sched, loader, counter = _setup("fp16")
    folder = Path(save_state(acc, tmp_path / "c"))
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([
        "checkpoint.json", "custom_checkpoint_0.pt", "model.safetensors", "optimizer.bin",
        "random_states_0.safetensors", "scaler.pt", "scheduler.bin", "training_state.json",
    ])  # fmt: skip
    meta = json.loads((folder / METADATA_NAME).read_text())
    assert meta["num_processes"] == 1 and meta["format_version"] == 3
    assert meta["files"]["model.safetensors"]["size"] == (folder / "model.safetensors").stat().st_size
    assert meta["content_digest"] == "accel-content-v3-xxh3-128"
    # Tensor files: checked by what they hold, each tensor by its own digest too.
    assert set(meta["files"]["optimizer.bin"]) == {"size", "content", "tensors"}
    assert set(meta["files"]["model.safetensors"]["tensors"]) == {
        "0.0.weight",
        "0.0.bias",
        "0.2.weight",
        "0.2.bias",
    }
    assert set(meta["files"]["training_state.json"]) == {"size", "sha256"}  # small files: by their bytes
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_random_states_and_step_are_restored(tmp_path):
    acc, *_ = _setup()
    acc.step = 5
    save_state(acc, tmp_path / "c")
    expected = (torch.rand(4), random.random(), np.random.rand(2))
    torch.manual_seed(99)
    acc.step = 0
    load_state(acc, tmp_path / "c")
    got = (torch.rand(4), random.random(), np.random.rand(2))
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1] and np.array_equal(got[2], expected[2])
    assert acc.step == 5


def test_loader_epoch_is_restored_without_arming_a_skip(tmp_path):
    acc, model, opt, sched, loader, counter = _setup()
    batches = iter(loader)
    next(batches), next(batches)
    save_state(acc, tmp_path / "c")
    acc2, _, _, _, loader2, _ = _setup()
    loader2.set_epoch(7)
    load_state(acc2, tmp_path / "c")
    assert loader2.epoch == 0
    assert len(list(loader2)) == len(loader2) == 10  # a whole epoch: no automatic skip


def test_automatic_naming_keeps_the_newest_total_limit(tmp_path):
    config = ProjectConfiguration(project_dir=tmp_path, automatic_checkpoint_naming=True, total_limit=2)
    acc, *_ = _setup(project=config)
    for step in range(4):
        acc.step = step
        save_state(acc)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["checkpoint_2", "checkpoint_3"]
    assert config.iteration == 4
    config2 = ProjectConfiguration(project_dir=tmp_path, automatic_checkpoint_naming=True, total_limit=2)
    acc2, *_ = _setup(project=config2)
    assert load_state(acc2).endswith("checkpoint_3") and acc2.step == 3
    assert config2.iteration == 4
    save_state(acc2)
    assert (tmp_path / "checkpoints" / "checkpoint_4").is_dir()


def test_automatic_naming_refuses_to_overwrite(tmp_path):
    config = ProjectConfiguration(project_dir=tmp_path, automatic_checkpoint_naming=True)
    acc, *_ = _setup(project=config)
    save_state(acc)
    config.iteration = 0
    with pytest.raises(ValueError, match="checkpoint_0 already exists"):
        save_state(acc)


def test_register_for_checkpointing_names_the_invalid_object():
    acc, *_ = _setup()
    with pytest.raises(ValueError, match="index 1, `int`"):
        registry_of(acc).register_for_checkpointing(Counter(), 3)


def test_save_and_load_hooks(tmp_path):
    acc, model, *_ = _setup()
    registry = registry_of(acc)
    calls = []

    def save_hook(models, weights, output_dir):
        calls.append(("save", len(models), sorted(weights[0]), os.path.isdir(output_dir)))
        Path(output_dir, "extra.txt").write_text("mine")
        weights.pop()

    def load_hook(models, input_dir):
        calls.append(("load", len(models), Path(input_dir, "extra.txt").read_text()))
        models.pop()

    handles = [
        registry.register_save_state_pre_hook(save_hook),
        registry.register_load_state_pre_hook(load_hook),
    ]
    folder = Path(save_state(acc, tmp_path / "c"))
    assert not (folder / "model.safetensors").exists() and (folder / "extra.txt").exists()
    load_state(acc, folder)
    assert calls == [("save", 1, ["0.bias", "0.weight", "2.bias", "2.weight"], True), ("load", 1, "mine")]
    for handle in handles:
        handle.remove()
    save_state(acc, tmp_path / "d")
    assert (tmp_path / "d" / "model.safetensors").exists() and len(calls) == 2


def _record_start(torch_file: bytes, name: str) -> tuple[int, int]:
    """Return the offset and size of record `name` ("data/0", "data.pkl") in a torch.save file."""
    entries = zipfile.ZipFile(io.BytesIO(torch_file)).infolist()
    entry = next(i for i in entries if i.filename.endswith("/" + name))
    start = entry.header_offset  # the local header: 30 bytes, the name, then the extra field
    name_length, extra_length = struct.unpack("<HH", torch_file[start + 26 : start + 30])
    return start + 30 + name_length + extra_length, entry.file_size


def test_corrupt_truncated_and_foreign_checkpoints_fail_naming_the_file(tmp_path):
    acc, model, optimizer, scheduler, loader, counter = _setup()
    _train(acc, model, optimizer, scheduler, list(loader)[:1], counter)  # AdamW now holds tensors
    folder = Path(save_state(acc, tmp_path / "c"))
    optimizer_file = folder / "optimizer.bin"
    intact = optimizer_file.read_bytes()
    tensor_start, tensor_size = _record_start(intact, "data/1")
    pickle_start, pickle_size = _record_start(intact, "data.pkl")
    for offset in (tensor_start + tensor_size // 2, pickle_start + pickle_size // 2):
        data = bytearray(intact)
        data[offset] ^= 0x10
        optimizer_file.write_bytes(data)
        with pytest.raises(CheckpointError, match=r"optimizer\.bin is corrupt"):
            load_state(acc, folder)
    # optimizer.bin is still corrupt; model.safetensors, read (and checked on a second thread) before
    # it, now is too: the earlier file's verdict is the one reported.
    weights_file = folder / "model.safetensors"
    weights = bytearray(weights_file.read_bytes())
    weights[-1] ^= 0x10  # the last tensor's last byte
    weights_file.write_bytes(weights)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupt: tensor '2\.weight' differs"):
        load_state(acc, folder)
    optimizer_file.write_bytes(data[:100])
    with pytest.raises(CheckpointError, match=r"optimizer\.bin is truncated"):
        load_state(acc, folder)

    folder = Path(save_state(acc, tmp_path / "d"))
    meta = json.loads((folder / METADATA_NAME).read_text())
    (folder / METADATA_NAME).write_text(json.dumps({**meta, "num_processes": 2}))
    with pytest.raises(
        CheckpointError, match=r"checkpoint\.json was written by 2 process\(es\); this job has 1"
    ):
        load_state(acc, folder)
    (folder / METADATA_NAME).unlink()
    with pytest.raises(CheckpointError, match="checkpoint.json is missing"):
        load_state(acc, folder)


class Payload:
    pass


class Sneaky:
    def state_dict(self):
        return {"payload": Payload()}

    def load_state_dict(self, state):
        raise AssertionError("must not be reached")


def test_format_1_checkpoints_checked_by_sha256_still_load(tmp_path):
    acc, model, optimizer, scheduler, loader, counter = _setup()
    _train(acc, model, optimizer, scheduler, list(loader)[:1], counter)
    folder = Path(save_state(acc, tmp_path / "c"))
    expected = (random.random(), np.random.rand(), torch.rand(1))
    # accel 0.1 kept the random states in a torch file, the generators' words as lists.
    new_file = folder / "random_states_0.safetensors"
    states = rng._from_file(_load_safetensors(new_file))
    states["python"][1], states["numpy"][1] = states["python"][1].tolist(), states["numpy"][1].tolist()
    torch.save(states, folder / "random_states_0.pt")
    new_file.unlink()
    meta = json.loads((folder / METADATA_NAME).read_text())
    meta["files"]["random_states_0.pt"] = meta["files"].pop("random_states_0.safetensors")
    meta["format_version"] = 1
    meta["files"] = {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name in meta["files"]
        for data in [(folder / name).read_bytes()]
    }
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    load_state(acc, folder)
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    data = bytearray((folder / "scheduler.bin").read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / "scheduler.bin").write_bytes(data)
    with pytest.raises(CheckpointError, match=r"scheduler\.bin is corrupt: its sha256 differs"):
        load_state(acc, folder)


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    acc, *_ = _setup()
    registry_of(acc).register_for_checkpointing(Sneaky())
    folder = save_state(acc, tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_1\.pt cannot be loaded as a weights-only"):
        load_state(acc, folder)


def test_different_prepared_objects_fail_clearly(tmp_path):
    acc, *_ = _setup()
    folder = save_state(acc, tmp_path / "c")
    acc2, *_ = _setup()
    registry_of(acc2).register_for_checkpointing(Counter())
    with pytest.raises(CheckpointError, match=r"holds 1 custom object\(s\) but this Accelerator has 2"):
        load_state(acc2, folder)


def test_replacing_a_checkpoint_and_recovering_an_interrupted_swap(tmp_path):
    acc, *_ = _setup()
    acc.step = 1
    save_state(acc, tmp_path / "c")
    acc.step = 2
    save_state(acc, tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    # A crash between "rename the old one away" and "rename the new one in":
    os.rename(tmp_path / "c", tmp_path / ".c.old-1234")
    load_state(acc, tmp_path / "c")
    assert acc.step == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    # A crash before the new one was complete leaves its temporary folder: it is dropped.
    (tmp_path / ".c.tmp-5678").mkdir()
    (tmp_path / ".c.tmp-5678" / "model.safetensors").write_bytes(b"partial")
    recover_folder(tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    # A crash while its checkpoint.json was being written (the file made, still empty), with nothing
    # in place: the temporary is not moved in as a checkpoint; it is dropped.
    shutil.rmtree(tmp_path / "c")
    (tmp_path / ".c.tmp-9abc").mkdir()
    (tmp_path / ".c.tmp-9abc" / "model.safetensors").write_bytes(b"whole")
    (tmp_path / ".c.tmp-9abc" / "checkpoint.json").write_bytes(b"")
    recover_folder(tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_save_model_shards_with_an_index(tmp_path):
    acc = Accelerator()
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    model = acc.prepare(model)
    save_model(acc, model, tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["model.safetensors"]
    save_model(acc, model, tmp_path / "many", max_shard_size=20_000)
    files = sorted(p.name for p in (tmp_path / "many").iterdir())
    assert files[-1] == "model.safetensors.index.json"
    assert files[0] == "model-00001-of-00004.safetensors" and len(files) == 5
    index = json.loads((tmp_path / "many" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(p.numel() * 4 for p in model.parameters())
    loaded = {}
    for name in set(index["weight_map"].values()):
        loaded.update(load_file(tmp_path / "many" / name))
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    save_model(acc, model, tmp_path / "many")  # one shard now: the stale shards and index go
    assert sorted(p.name for p in (tmp_path / "many").iterdir()) == ["model.safetensors"]
    save_model(acc, model, tmp_path / "bin", safe_serialization=False, max_shard_size="40KB")
    assert (tmp_path / "bin" / "pytorch_model.bin.index.json").exists()


def test_tied_weights_survive_safetensors(tmp_path):
    acc = Accelerator()
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    folder = save_state(acc, tmp_path / "c")
    with torch.no_grad():
        model[0].weight.zero_()
    load_state(acc, folder)
    assert model[0].weight.abs().sum() > 0 and model[1].weight is model[0].weight
    save_model(acc, model, tmp_path / "m")


def test_parse_size():
    assert parse_size("10GB") == 10**10 and parse_size("2GiB") == 2 * 2**30 and parse_size(5) == 5
    for bad in ("ten", 1e9, 0, -5, None):
        with pytest.raises(ValueError, match="max_shard_size must be a positive number"):
            parse_size(bad)


def _save_and_load_in_child(acc, folder):
    load_state(acc, save_state(acc, folder))


@pytest.mark.slow
def test_a_forked_child_saves_and_loads_with_its_own_checking_thread(tmp_path):
    import multiprocessing

    acc, *_ = _setup()
    load_state(acc, save_state(acc, tmp_path / "parent"))  # the parent's checking thread now exists
    child = multiprocessing.get_context("fork").Process(
        target=_save_and_load_in_child, args=(acc, tmp_path / "child")
    )
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0  # with the parent's (dead) thread it would wait forever
    assert (tmp_path / "child" / METADATA_NAME).is_file()


def test_a_loader_that_cannot_resume_is_refused_before_anything_is_restored(tmp_path):
    acc, model, optimizer, scheduler, loader, counter = _setup()
    folder = save_state(acc, tmp_path / "c")
    _train(acc, model, optimizer, scheduler, list(loader)[:2], counter)
    trained = _weights(model)

    class EpochOnly:
        def set_epoch(self, epoch):
            pass

    acc._dataloaders.append(EpochOnly())
    with pytest.raises(ValueError, match="EpochOnly has no load_state_dict"):
        load_state(acc, folder, restore_dataloader_position=True)
    assert all(torch.equal(trained[k], v) for k, v in _weights(model).items())
