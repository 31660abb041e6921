"""load_state reads torch files mapped, yet no restored object keeps a view of a file: the optimizer's
state lands in the tensors it already holds (or in new memory when it has none), other torch files'
tensors in new memory; a file written after the load changes nothing; old-format files still load."""

from __future__ import annotations

from pathlib import Path

import torch

from accel import Accelerator, set_seed
from accel.checkpointing import load_state, save_state
from accel.checkpointing.owned_memory import into_optimizer_memory
from accel.checkpointing.reader import _load_torch


class Counter:
    """A registered object whose state is a tensor (custom_checkpoint_0.pt)."""

    def __init__(self) -> None:
        self.seen = torch.zeros(1000)

    def state_dict(self) -> dict:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.seen = state["seen"]


def _trained(seed: int):
    accelerator = Accelerator()
    set_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 300), torch.nn.Linear(300, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    model(torch.randn(5, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    counter.seen += seed + 1
    return accelerator, model, optimizer, counter


def _state_tensors(optimizer) -> dict:
    inner = optimizer.optimizer
    return {
        (i, k): v for i, p in enumerate(inner.param_groups[0]["params"]) for k, v in inner.state[p].items()
    }


def _scribble(path: Path) -> None:
    """Overwrite the second half of a file in place (same inode): a mapping of it would see the change."""
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\x7f" * (size - size // 2 - 512))


def test_state_is_copied_into_the_optimizer_s_own_tensors_and_no_file_is_kept(tmp_path):
    saver, _, saved_optimizer, saved_counter = _trained(seed=1)
    folder = Path(save_state(saver, tmp_path / "c"))
    expected = {key: value.clone() for key, value in _state_tensors(saved_optimizer).items()}

    accelerator, _, optimizer, counter = _trained(seed=2)  # a state of its own, of the same shapes
    held = {key: value.data_ptr() for key, value in _state_tensors(optimizer).items()}
    load_state(accelerator, folder)
    loaded = _state_tensors(optimizer)
    assert {key: value.data_ptr() for key, value in loaded.items()} == held  # no new memory
    assert all(torch.equal(loaded[key], value) for key, value in expected.items())
    assert torch.equal(counter.seen, saved_counter.seen)

    for name in ("optimizer.bin", "custom_checkpoint_0.pt"):
        _scribble(folder / name)
    assert all(torch.equal(loaded[key], value) for key, value in expected.items())
    assert torch.equal(counter.seen, saved_counter.seen)


def test_an_optimizer_without_state_gets_memory_of_its_own(tmp_path):
    saver, _, saved_optimizer, _ = _trained(seed=1)
    folder = Path(save_state(saver, tmp_path / "c"))
    expected = {key: value.clone() for key, value in _state_tensors(saved_optimizer).items()}

    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(8, 300), torch.nn.Linear(300, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(Counter())
    assert not _state_tensors(optimizer)
    load_state(accelerator, folder)
    _scribble(folder / "optimizer.bin")
    loaded = _state_tensors(optimizer)
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[key], value) for key, value in expected.items())


def test_a_state_of_another_shape_or_form_is_copied_into_new_memory(tmp_path):
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
    optimizer.state[weight]["momentum_buffer"] = torch.zeros(2)  # not the saved shape
    torch.save(
        {"state": {0: {"momentum_buffer": torch.arange(3.0)}}, "param_groups": [{"params": [0]}]},
        tmp_path / "o.pt",
    )
    mapped = _load_torch(tmp_path / "o.pt")
    moved = into_optimizer_memory(optimizer, mapped)["state"][0]["momentum_buffer"]
    assert moved.data_ptr() != mapped["state"][0]["momentum_buffer"].data_ptr()
    assert torch.equal(moved, torch.arange(3.0))
    listed = [torch.ones(2)]  # a state dict of another form: copied whole
    copied = into_optimizer_memory(optimizer, listed)
    assert copied[0].data_ptr() != listed[0].data_ptr() and torch.equal(copied[0], listed[0])


def test_a_torch_file_of_the_older_format_still_loads(tmp_path):
    torch.save({"a": torch.arange(4)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    assert torch.equal(_load_torch(tmp_path / "old.pt")["a"], torch.arange(4))


def test_a_file_system_that_cannot_map_files_still_loads(tmp_path, monkeypatch):
    saver, _, saved_optimizer, _ = _trained(seed=1)
    folder = Path(save_state(saver, tmp_path / "c"))
    expected = {key: value.clone() for key, value in _state_tensors(saved_optimizer).items()}
    real_load = torch.load
    mapped = []

    def no_mmap(*args, **kwargs):
        if kwargs.get("mmap"):
            mapped.append(args[0])
            raise OSError(19, "No such device")  # what mmap(2) says on a file system without it
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", no_mmap)
    accelerator, _, optimizer, _ = _trained(seed=2)
    load_state(accelerator, folder)
    assert mapped  # every torch file was tried mapped first
    loaded = _state_tensors(optimizer)
    assert all(torch.equal(loaded[key], value) for key, value in expected.items())
