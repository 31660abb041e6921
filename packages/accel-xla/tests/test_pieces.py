"""The adapter's pieces on their own: padding, moving and re-tying, host copies, the storm watch,
the communicator's object exchange."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch_xla

from accel_xla import RecompilationWarning, pad_to_multiple_of
from accel_xla.engine import recompilation as recompilation_module
from accel_xla.engine.communicator import XlaCommunicator
from accel_xla.engine.host import to_host
from accel_xla.engine.placement import MovedParameters, move_model, rebind_optimizer
from accel_xla.engine.recompilation import RecompilationWatch


def test_pad_to_multiple_of_pads_the_chosen_dim_of_every_tensor():
    batch = {"ids": torch.ones(2, 5, dtype=torch.long), "mask": torch.ones(2, 8), "label": torch.tensor(1)}
    padded = pad_to_multiple_of(batch, 8, value=0)
    assert padded["ids"].shape == (2, 8) and padded["ids"][:, 5:].eq(0).all()
    assert padded["mask"] is batch["mask"]  # already a multiple
    assert padded["label"] is batch["label"]  # no such dim
    assert pad_to_multiple_of(torch.ones(3, 2), 4, dim=0).shape == (4, 2)
    with pytest.raises(ValueError, match="positive integer"):
        pad_to_multiple_of(batch, 0)


def test_move_model_reties_shared_weights_and_records_the_replacements():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    host_weight = model[0].weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    moved = MovedParameters()
    move_model(model, torch_xla.device(), moved)
    assert model[1].weight is model[0].weight
    assert moved.replacement(host_weight) is model[0].weight
    rebind_optimizer(optimizer, moved)
    assert optimizer.param_groups[0]["params"] == [model[0].weight]


def test_rebinding_carries_optimizer_state_to_the_moved_parameters():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    moved = MovedParameters()
    move_model(model, torch_xla.device(), moved)
    rebind_optimizer(optimizer, moved)
    state = optimizer.state[model.weight]
    assert state["exp_avg"].device.type == "xla"
    assert len(optimizer.state) == 2


def test_to_host_copies_xla_tensors_once_each_and_leaves_others():
    shared = torch.ones(2, device=torch_xla.device())
    cpu = torch.zeros(1)
    copied = to_host({"a": shared, "b": shared, "c": cpu, "n": 3})
    assert copied["a"].device.type == "cpu" and copied["a"] is copied["b"]
    assert copied["c"] is cpu and copied["n"] == 3
    plain = {"c": cpu}
    assert to_host(plain) is plain


def test_the_watch_warns_once_after_new_graphs_at_consecutive_steps(monkeypatch):
    counts = iter([1, 2, 3, 4, 5, 6, 7, 8])
    monkeypatch.setattr(recompilation_module, "compiled_graphs", lambda: next(counts))
    watch = RecompilationWatch(warm_up_steps=2, storm_steps=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for length in range(8):
            watch.saw_batch([(4, length)])
            watch.after_step()
    storms = [w for w in caught if issubclass(w.category, RecompilationWarning)]
    assert len(storms) == 1
    assert "(4, 4)" in str(storms[0].message)  # the batch of the step that warned


def test_the_watch_stays_quiet_when_graphs_are_reused(monkeypatch):
    counts = iter([3, 5, 6, 6, 7, 7, 7, 8, 8, 8])  # warm-up compiles, then an occasional new graph
    monkeypatch.setattr(recompilation_module, "compiled_graphs", lambda: next(counts))
    watch = RecompilationWatch(warm_up_steps=2, storm_steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)
        for _ in range(10):
            watch.after_step()


def test_the_communicator_exchanges_objects_on_one_replica():
    communicator = XlaCommunicator()
    assert communicator.all_gather_object({"a": 1}, 1) == [{"a": 1}]
    objects = ["x", 2]
    communicator.broadcast_object_list(objects, 0)
    assert objects == ["x", 2]
    assert communicator.scatter_object([{"mine": True}], 0) == {"mine": True}
    tensor = torch.arange(3.0, device=torch_xla.device())
    communicator.broadcast(tensor, 0)
    communicator.all_reduce_max(tensor)
    out = torch.empty(3, device=torch_xla.device())
    communicator.all_gather_into(out, tensor)
    assert out.cpu().tolist() == [0.0, 1.0, 2.0]
    communicator.barrier()


def test_importing_the_adapter_imports_no_torch_xla():
    import subprocess
    import sys

    code = "import sys, accel_xla; assert 'torch_xla' not in sys.modules, 'torch_xla imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
