"""The backend's step logic against a stand-in engine: accumulation boundary, skipped steps,
clipping handed to the engine, checkpoints leaving engine-owned objects to the engine.
No DeepSpeed process is started (the engine is the only part of DeepSpeed these methods touch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from accel_deepspeed import DeepSpeedConfigError, DeepSpeedPlugin
from accel_deepspeed.backend import DeepSpeedBackend
from accel_deepspeed.engine.objects import EngineScheduler
from accel_state import BackendOptions, GradientState, PreparedObjects


class FakeEngine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.module = torch.nn.Linear(2, 1)
        self.optimizer = SimpleNamespace(clip_grad=0.0)
        self._config = SimpleNamespace(gradient_clipping=0.0)
        self.calls: list[tuple] = []
        self.applied = True

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        self.calls.append(("boundary", is_boundary))

    def backward(self, loss: torch.Tensor) -> None:
        self.calls.append(("backward",))

    def step(self) -> None:
        self.calls.append(("step",))

    def was_step_applied(self) -> bool:
        return self.applied

    def gradient_clipping(self) -> float:
        return self._config.gradient_clipping

    def save_checkpoint(self, folder: str, tag: str, save_latest: bool) -> None:
        self.calls.append(("save", tag, save_latest))


def _backend(plugin: DeepSpeedPlugin | None = None) -> tuple[DeepSpeedBackend, FakeEngine]:
    backend = DeepSpeedBackend(
        SimpleNamespace(num_processes=1), BackendOptions(plugin=plugin or DeepSpeedPlugin())
    )
    engine = FakeEngine()
    backend.engine = engine
    return backend, engine


def test_backward_hands_the_sync_decision_to_the_engine_as_its_boundary():
    backend, engine = _backend()
    state = GradientState()
    state._set_sync_gradients(False)
    backend.backward(torch.tensor(1.0, requires_grad=True))
    state._set_sync_gradients(True)
    backend.backward(torch.tensor(1.0, requires_grad=True))
    assert engine.calls == [("boundary", False), ("backward",), ("boundary", True), ("backward",)]


def test_a_step_the_engine_did_not_apply_is_reported_skipped():
    backend, engine = _backend()
    assert backend.optimizer_step(torch.optim.SGD([torch.zeros(1)], lr=0.1)) == (None, False)
    engine.applied = False  # an fp16 overflow
    assert backend.optimizer_step(torch.optim.SGD([torch.zeros(1)], lr=0.1)) == (None, True)
    with pytest.raises(ValueError, match="without a closure"):
        backend.optimizer_step(torch.optim.SGD([torch.zeros(1)], lr=0.1), closure=lambda: 0.0)


def test_clipping_is_set_on_the_engine_and_a_different_configured_value_is_refused():
    backend, engine = _backend()
    assert backend.clip_grad_norm_([], 0.5) is None
    assert engine._config.gradient_clipping == 0.5 and engine.optimizer.clip_grad == 0.5
    with pytest.raises(ValueError, match="2-norm only"):
        backend.clip_grad_norm_([], 0.5, norm_type=1.0)
    with pytest.raises(ValueError, match="clips by norm only"):
        backend.clip_grad_value_([], 0.5)
    configured, engine = _backend(DeepSpeedPlugin(gradient_clipping=1.0))
    engine._config.gradient_clipping = 1.0
    with pytest.raises(
        DeepSpeedConfigError, match=r'clip_grad_norm_\(max_norm=0.5\) but .* "gradient_clipping": 1.0'
    ):
        configured.clip_grad_norm_([], 0.5)


def test_clip_grad_norm_clips_where_the_json_leaves_clipping_to_auto(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"gradient_clipping": "auto"}')
    backend, engine = _backend(DeepSpeedPlugin(hf_ds_config=str(path)))
    assert backend.resolved.config["gradient_clipping"] == 0.0  # off until asked
    backend.clip_grad_norm_([], 0.25)
    assert engine._config.gradient_clipping == 0.25 and engine.optimizer.clip_grad == 0.25


def test_accumulation_from_the_json_becomes_the_runs_accumulation(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"gradient_accumulation_steps": 3}')
    _backend(DeepSpeedPlugin(hf_ds_config=str(path)))
    assert GradientState().num_steps == 3


def test_save_checkpoint_leaves_only_what_the_engine_does_not_own(tmp_path):
    backend, engine = _backend()
    engine_scheduler = SimpleNamespace(
        scheduler=EngineScheduler(object())
    )  # as AcceleratedScheduler holds it
    client_scheduler = SimpleNamespace(scheduler=object())
    prepared = PreparedObjects(
        models=[engine],
        optimizers=[SimpleNamespace(optimizer=engine.optimizer)],
        schedulers=[engine_scheduler, client_scheduler],
        data_loaders=["loader"],
    )
    left = backend.save_checkpoint(prepared, tmp_path)
    assert engine.calls == [("save", "deepspeed", False)]
    assert left.models == [] and left.optimizers == [] and left.schedulers == [client_scheduler]
    assert left.data_loaders == ["loader"]
    with pytest.raises(DeepSpeedConfigError, match="holds no DeepSpeed engine checkpoint"):
        backend.load_checkpoint(prepared, tmp_path / "elsewhere")


def test_prepare_refuses_what_one_engine_cannot_hold():
    backend, _ = _backend()
    backend.engine = None
    two = PreparedObjects(models=[torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)])
    with pytest.raises(DeepSpeedConfigError, match="one model per Accelerator; prepare\\(\\) got 2"):
        backend.prepare(two)
    alone = PreparedObjects(optimizers=[torch.optim.SGD([torch.zeros(1)], lr=0.1)])
    with pytest.raises(DeepSpeedConfigError, match="prepare the model together with its optimizer"):
        backend.prepare(alone)


def test_at_exit_the_engine_is_destroyed_once_then_the_backends_teardown_runs(monkeypatch):
    from accel_state.backends import teardown

    monkeypatch.setattr(teardown, "_held", {})
    backend, engine = _backend()
    order: list[str] = []
    engine.destroy = lambda: order.append("engine.destroy")  # type: ignore[method-assign]
    monkeypatch.setattr(
        DeepSpeedBackend, "teardown", classmethod(lambda cls: order.append(f"{cls.__name__}.teardown"))
    )
    from accel_deepspeed.engine.teardown import destroy_engine

    # What _initialize registers for the engine it built.
    teardown.release_at_exit(backend, engine, destroy_engine)
    teardown.release_at_exit(backend, engine, destroy_engine)  # held once
    teardown.teardown_backends()
    teardown.teardown_backends()  # once: the registry is empty now
    assert order == ["engine.destroy", "DeepSpeedBackend.teardown"]


def test_the_teardown_drops_deepspeeds_group_references(monkeypatch):
    import sys
    import types

    fake_groups = types.ModuleType("deepspeed.utils.groups")
    fake_groups._WORLD_GROUP = object()
    fake_groups._EXPERT_PARALLEL_GROUP = {"ep": object()}
    fake_groups.mesh_device = object()
    monkeypatch.setitem(sys.modules, "deepspeed.utils.groups", fake_groups)
    DeepSpeedBackend.teardown()
    assert fake_groups._WORLD_GROUP is None and fake_groups._EXPERT_PARALLEL_GROUP == {}
    assert fake_groups.mesh_device is None
