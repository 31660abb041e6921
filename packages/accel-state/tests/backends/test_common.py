"""What the backends share (accel_state.backends.common), on real torch objects."""

from __future__ import annotations

import datetime
import warnings
from types import SimpleNamespace

import pytest
import torch

from accel_state import FsdpBackend, FsdpConfigError, GradientState, NativeBackend, PreparedObjects
from accel_state.backends.common import (
    BackendBase,
    UnsupportedPrecisionError,
    check_precision_supported,
    join_job,
    left_to_generic_code,
    unscale_then_clip_norm,
    unwrap,
)
from accel_state.environment.launch_env import LaunchEnvironment
from accel_state.seam.backend import BackendOptions, ProcessRequest
from accel_state.seam.precision_protocol import FullPrecision

CPU_STATE = SimpleNamespace(
    device=torch.device("cpu"), num_processes=1, process_index=0, use_distributed=False
)


class ScaledPrecision(FullPrecision):
    """fp16's loss scaling through a real GradScaler on the CPU (the step stays fp32)."""

    mode = "fp16"

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scaler = torch.amp.GradScaler("cpu", init_scale=scale)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)


def _model_and_gradients(seed: int = 0) -> tuple[torch.nn.Linear, torch.optim.SGD, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 3)).pow(2).sum()
    return model, optimizer, loss


def test_a_refused_precision_names_the_backend_the_precision_and_the_supported_ones():
    with pytest.raises(UnsupportedPrecisionError) as caught:
        check_precision_supported("XLA", "fp16", ("no", "bf16"))
    assert str(caught.value) == (
        "mixed precision 'fp16' is not supported by the XLA backend; use one of 'no', 'bf16'"
    )
    check_precision_supported("XLA", "bf16", ("no", "bf16"))  # supported: nothing raised


def test_fsdp_refuses_fp16_with_the_shared_message_and_its_own_error_class():
    class Fp16(FullPrecision):
        mode = "fp16"

    refused = "^mixed precision 'fp16' is not supported by the FSDP backend; use one of 'no', 'bf16'$"
    with pytest.raises(FsdpConfigError, match=refused):
        FsdpBackend(CPU_STATE, BackendOptions(precision=Fp16()))


def test_clipping_unscales_first_so_it_sees_the_true_norm():
    model, optimizer, loss = _model_and_gradients()
    loss.backward(retain_graph=True)
    true_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    model.zero_grad()
    precision = ScaledPrecision(scale=1024.0)
    backend = NativeBackend(CPU_STATE, BackendOptions(precision=precision))
    backend.backward(loss)
    scaled = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert scaled.item() == pytest.approx(1024.0 * true_norm.item(), rel=1e-5)
    norm = backend.clip_grad_norm_(model.parameters(), max_norm=0.5, optimizers=[optimizer])
    assert norm.item() == pytest.approx(true_norm.item(), rel=1e-5)
    clipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert clipped.item() == pytest.approx(0.5, rel=1e-4)


def test_value_clipping_unscales_first_too():
    model, optimizer, loss = _model_and_gradients(seed=1)
    precision = ScaledPrecision(scale=1e6)
    backend = NativeBackend(CPU_STATE, BackendOptions(precision=precision))
    backend.backward(loss)
    unscaled = [p.grad.clone() / 1e6 for p in model.parameters()]
    backend.clip_grad_value_(model.parameters(), clip_value=1e9, optimizers=[optimizer])
    for gradient, expected in zip((p.grad for p in model.parameters()), unscaled, strict=True):
        torch.testing.assert_close(gradient, expected)


def test_accumulating_gradients_are_clipped_without_being_unscaled():
    model, optimizer, loss = _model_and_gradients(seed=2)
    precision = ScaledPrecision(scale=8.0)
    backend = NativeBackend(CPU_STATE, BackendOptions(precision=precision))
    backend.backward(loss)
    scaled = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    GradientState()._set_sync_gradients(False)  # inside an accumulation window
    norm = unscale_then_clip_norm(backend, model.parameters(), 1e9, 2.0, [optimizer])
    assert norm.item() == pytest.approx(scaled.item(), rel=1e-6)


def test_unwrap_goes_through_the_wrappers_and_torch_compile():
    class Wrapper(torch.nn.Module):
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module = module

    inner = torch.nn.Linear(1, 1)
    wrapped = torch.compile(Wrapper(torch.compile(inner)))
    assert unwrap(wrapped, Wrapper) is inner
    assert unwrap(wrapped) is not inner, "a wrapper not named is kept"


def test_the_generic_checkpoint_code_gets_what_the_backend_did_not_save():
    model, kept_model = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped_optimizer = SimpleNamespace(optimizer=optimizer)  # as the facade's AcceleratedOptimizer
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    prepared = PreparedObjects(
        models=[model, kept_model],
        optimizers=[wrapped_optimizer],
        schedulers=[SimpleNamespace(scheduler=scheduler)],
        data_loaders=["loader"],
    )
    prepared.device_placement[id(kept_model)] = False
    saved = {id(model), id(optimizer)}
    left = left_to_generic_code(prepared, lambda obj: id(obj) in saved)
    assert left.models == [kept_model] and left.optimizers == []
    assert [s.scheduler for s in left.schedulers] == [scheduler], "a scheduler is not its optimizer"
    assert left.data_loaders == ["loader"]
    assert left.places(kept_model) is False
    assert left.device_placement is not prepared.device_placement


def test_a_backend_without_join_warns_naming_itself_and_its_sync_contexts_do_nothing():
    class Engine(BackendBase):
        name = "Engine"

    backend = Engine()
    model = torch.nn.Linear(1, 1)
    with pytest.warns(UserWarning, match="no effect under the Engine backend"), backend.join([model]):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with backend.no_sync(model), backend.trigger_sync_in_backward(model):
            pass
    assert backend.unwrap_model(model) is model
    prepared = PreparedObjects(models=[model])
    assert backend.save_checkpoint(prepared, None) is prepared  # type: ignore[arg-type]


def test_a_lone_process_joins_no_group_unless_its_engine_needs_one():
    import torch.distributed as dist

    lone = LaunchEnvironment(rank=0, world_size=1, local_rank=0, local_world_size=1)
    device, group_backend = join_job(ProcessRequest(lone, cpu=True, timeout=datetime.timedelta(seconds=10)))
    assert (device, group_backend) == (torch.device("cpu"), None)
    assert not dist.is_initialized()
