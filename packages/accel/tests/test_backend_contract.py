"""The Backend seam's contract: the facade decides nothing a backend takes over.

A recording backend is registered for a distributed type and chosen through the launcher's
variable, as an adapter would be; the whole training loop then runs through the facade, and the
test asserts what reached the backend (and that nothing bypassed it).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, CheckpointError, DistributedType
from accel_amp import AcceleratedOptimizer, AcceleratedScheduler
from accel_state import BackendDefaults, DdpOptions, PreparedObjects, ProcessSetup, TorchCommunicator
from accel_state.seam import backend as backend_module


class _EngineModule(torch.nn.Module):
    """What the recording backend wraps models in (as DDP or an engine would)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class RecordingBackend(BackendDefaults):
    """Implements the Backend protocol by recording each call and doing the least that works."""

    per_thread_state = False
    checkpoint_format = "torch"  # a plain attribute: tests set it
    instances: list[RecordingBackend] = []

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def setup_process(cls, launch, *, cpu, timeout):
        return ProcessSetup(DistributedType.FSDP, torch.device("cpu"), None, TorchCommunicator())

    def __init__(self, state, options) -> None:
        self.state = state
        self.options = options
        self.plugin = options.plugin
        self.precision = options.precision
        self.calls: list[tuple] = []
        self.skip_next_step = False
        RecordingBackend.instances.append(self)

    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        self.calls.append(("prepare", objects))
        wrapped = PreparedObjects(
            models=[_EngineModule(m) for m in objects.models],
            optimizers=list(objects.optimizers),
            schedulers=list(objects.schedulers),
            data_loaders=list(objects.data_loaders),
        )
        return wrapped

    def backward(self, loss, **kwargs):
        self.calls.append(("backward", loss.item(), kwargs))
        loss.backward(**kwargs)

    def optimizer_step(self, optimizer, closure=None):
        skipped, self.skip_next_step = self.skip_next_step, False
        self.calls.append(("optimizer_step", optimizer))
        if not skipped:
            optimizer.step()
        return None, skipped

    def unscale_gradients(self, optimizer):
        self.calls.append(("unscale_gradients", optimizer))

    def no_sync(self, model):
        self.calls.append(("no_sync", model))
        return contextlib.nullcontext()

    def trigger_sync_in_backward(self, model):
        self.calls.append(("trigger_sync_in_backward", model))
        return contextlib.nullcontext()

    def join(self, joinables):
        self.calls.append(("join", joinables))
        return contextlib.nullcontext()

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2.0, optimizers=()):
        self.calls.append(("clip_grad_norm_", max_norm, norm_type, list(optimizers)))
        return torch.tensor(42.0)

    def clip_grad_value_(self, parameters, clip_value, optimizers=()):
        self.calls.append(("clip_grad_value_", clip_value, list(optimizers)))

    def autocast(self, enabled=True, **kwargs):
        self.calls.append(("autocast", enabled))
        return contextlib.nullcontext()

    def unwrap_model(self, model):
        self.calls.append(("unwrap_model", model))
        return model.module if isinstance(model, _EngineModule) else model

    def get_state_dict(self, model):
        self.calls.append(("get_state_dict", model))
        return self.unwrap_model(model).state_dict()

    def load_state_dict(self, model, state_dict):
        self.calls.append(("load_state_dict", model))
        self.unwrap_model(model).load_state_dict(state_dict)

    def save_checkpoint(self, prepared, folder: Path):
        # Saves the models itself (as an engine saving its shards would) and leaves the rest.
        self.calls.append(("save_checkpoint", prepared, folder))
        for i, model in enumerate(prepared.models):
            torch.save(self.unwrap_model(model).state_dict(), folder / f"engine_model_{i}.pt")
        return PreparedObjects([], prepared.optimizers, prepared.schedulers, prepared.data_loaders)

    def load_checkpoint(self, prepared, folder: Path):
        self.calls.append(("load_checkpoint", prepared, folder))
        for i, model in enumerate(prepared.models):
            state = torch.load(folder / f"engine_model_{i}.pt", weights_only=True)
            self.unwrap_model(model).load_state_dict(state)
        return PreparedObjects([], prepared.optimizers, prepared.schedulers, prepared.data_loaders)

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


@pytest.fixture
def recording(monkeypatch):
    """Register the recording backend for FSDP and select it as the launcher would."""
    saved = dict(backend_module._registry)
    backend_module.register_backend(DistributedType.FSDP, RecordingBackend)
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "FSDP")
    RecordingBackend.instances.clear()
    try:
        yield
    finally:
        backend_module._registry.clear()
        backend_module._registry.update(saved)


def _objects():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    return model, optimizer, scheduler, loader


def test_the_backend_is_chosen_once_and_built_with_its_options(recording):
    accelerator = Accelerator(mixed_precision="bf16", ddp_kwargs={"find_unused_parameters": True})
    (backend,) = RecordingBackend.instances
    assert accelerator.backend is backend
    assert accelerator.distributed_type is DistributedType.FSDP
    assert backend.options.precision.mode == "bf16"
    assert backend.options.engine_options == (DdpOptions(kwargs={"find_unused_parameters": True}),)
    assert accelerator.precision is backend.precision


def test_a_plugin_reaches_the_backend_untouched_and_returns_under_its_keyword(recording):
    plugin = SimpleNamespace(distributed_type=DistributedType.FSDP)
    accelerator = Accelerator(fsdp_plugin=plugin)
    (backend,) = RecordingBackend.instances
    assert backend.options.plugin is plugin
    assert accelerator.fsdp_plugin is plugin and accelerator.is_fsdp2
    assert accelerator.deepspeed_plugin is None


def test_prepare_hands_all_four_kinds_to_the_backend_in_one_call(recording):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    model, optimizer, scheduler, loader = _objects()
    other = {"left": "alone"}
    p_model, p_opt, p_other, p_sched, p_loader = accelerator.prepare(
        model, optimizer, other, scheduler, loader, device_placement=[False, True, True, True, True]
    )
    assert backend.names() == ["prepare"]
    handed: PreparedObjects = backend.calls[0][1]
    assert handed.models == [model] and handed.optimizers == [optimizer] and handed.schedulers == [scheduler]
    assert len(handed.data_loaders) == 1 and handed.data_loaders[0] is p_loader  # sharded by the facade
    assert handed.places(model) is False and handed.places(optimizer) is True
    assert isinstance(p_model, _EngineModule) and p_model.module is model
    assert (
        isinstance(p_opt, AcceleratedOptimizer) and p_opt.optimizer is optimizer and p_opt.stepper is backend
    )
    assert isinstance(p_sched, AcceleratedScheduler) and p_sched.optimizers == [p_opt]
    assert p_other is other
    registry = accelerator.prepared
    assert (registry.models, registry.optimizers, registry.schedulers, registry.data_loaders) == (
        [p_model],
        [p_opt],
        [p_sched],
        [p_loader],
    )


def test_the_training_step_goes_through_the_backend(recording):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    backend = RecordingBackend.instances[0]
    model, optimizer, scheduler, loader = accelerator.prepare(*_objects())
    backend.calls.clear()
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss, retain_graph=True)
            norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
            accelerator.clip_grad_value_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    raw = optimizer.optimizer
    # Four batches, windows of two: no_sync on the first of each, a step on the second.
    assert backend.names() == [
        "no_sync", "backward", "clip_grad_norm_", "clip_grad_value_",
        "backward", "clip_grad_norm_", "clip_grad_value_", "optimizer_step",
    ] * 2  # fmt: skip
    backwards = [call for call in backend.calls if call[0] == "backward"]
    assert all(kwargs == {"retain_graph": True} for _, _, kwargs in backwards)
    assert norm.item() == 42.0  # the backend's norm is what the user gets
    assert ("clip_grad_norm_", 1.0, 2.0, [raw]) in backend.calls
    assert ("clip_grad_value_", 0.5, [raw]) in backend.calls
    assert [call[1] for call in backend.calls if call[0] == "optimizer_step"] == [raw, raw]


def test_the_loss_reaches_the_backend_undivided_and_unscaled(recording):
    accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="fp16")
    backend = RecordingBackend.instances[0]
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    loss = model(torch.ones(1, 1)).sum()
    accelerator.backward(loss)
    assert backend.calls[-1] == ("backward", loss.item(), {})


def test_a_step_the_backend_skipped_is_reported_and_holds_the_scheduler(recording):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    model, optimizer, scheduler, _ = accelerator.prepare(*_objects())
    lr = scheduler.get_last_lr()
    accelerator.backward(model(torch.ones(1, 2)).sum())
    backend.skip_next_step = True
    optimizer.step()
    scheduler.step()
    assert accelerator.optimizer_step_was_skipped
    assert scheduler.get_last_lr() == lr
    optimizer.step()
    assert not accelerator.optimizer_step_was_skipped


def test_unwrap_state_dict_autocast_and_unscale_go_through_the_backend(recording):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    model, optimizer, _, _ = accelerator.prepare(*_objects())
    backend.calls.clear()
    assert accelerator.unwrap_model(model) is model.module
    assert set(accelerator.get_state_dict(model)) == {"weight", "bias"}
    with accelerator.autocast():
        pass
    accelerator.unscale_gradients()
    assert backend.names() == [
        "unwrap_model",
        "get_state_dict",
        "unwrap_model",
        "autocast",
        "unscale_gradients",
    ]


def test_save_and_load_state_let_the_backend_keep_what_it_saves_itself(recording, tmp_path):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    model, optimizer, scheduler, loader = accelerator.prepare(*_objects())
    accelerator.backward(model(torch.ones(1, 2)).sum())
    optimizer.step()
    scheduler.step()
    saved_weight = model.module.weight.detach().clone()
    backend.calls.clear()
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    (name, handed, written_into) = backend.calls[0]
    assert name == "save_checkpoint" and handed is accelerator.prepared
    assert written_into != folder and written_into.parent == folder.parent  # the atomic temporary folder
    files = {p.name for p in folder.iterdir()}
    assert "engine_model_0.pt" in files and "optimizer.bin" in files and "scheduler.bin" in files
    assert not any(f.startswith("model") for f in files)  # the backend kept the model
    assert json.loads((folder / "checkpoint.json").read_text())["model_files"] == []
    with torch.no_grad():
        model.module.weight.zero_()
    optimizer.step()
    scheduler.step()
    backend.calls.clear()
    accelerator.load_state(folder)
    assert backend.names()[0] == "load_checkpoint"
    assert "load_state_dict" not in backend.names()  # the generic code loaded no model
    assert torch.equal(model.module.weight, saved_weight)
    assert scheduler.scheduler.last_epoch == 1


def test_trigger_sync_in_backward_goes_through_the_backend(recording):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    backend.calls.clear()
    with accelerator.no_sync(model), accelerator.trigger_sync_in_backward(model):
        accelerator.backward(model(torch.ones(1, 2)).sum())
    assert backend.names() == ["no_sync", "trigger_sync_in_backward", "backward"]
    assert backend.calls[1][1] is model


def test_a_checkpoint_loads_only_into_a_backend_of_its_format(recording, tmp_path):
    accelerator = Accelerator()
    backend = RecordingBackend.instances[0]
    accelerator.prepare(*_objects())
    backend.checkpoint_format = "engine-files"
    folder = Path(accelerator.save_state(tmp_path / "ckpt"))
    assert json.loads((folder / "checkpoint.json").read_text())["checkpoint_format"] == "engine-files"
    backend.checkpoint_format = "torch"
    with pytest.raises(CheckpointError, match="model and optimizer files are in engine-files's format"):
        accelerator.load_state(folder)


def test_local_sgd_runs_only_on_a_backend_that_replicates_the_model(recording):
    from accel.local_sgd import LocalSGD

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    with pytest.raises(NotImplementedError, match="every process holds the whole model"):
        LocalSGD(accelerator, model, local_sgd_steps=2)
    RecordingBackend.instances[0].replicates_model = True
    with LocalSGD(accelerator, model, local_sgd_steps=2) as local_sgd:
        local_sgd.step()
    assert not local_sgd.enabled  # one process: nothing to average
