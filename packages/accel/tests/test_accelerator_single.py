"""`Accelerator` on one CPU process: its facts, `prepare`, and the training-step helpers."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DistributedType, set_seed
from accel.testing import train_steps
from accel_amp import AcceleratedOptimizer, AcceleratedScheduler
from accel_data import DataLoaderShard
from accel_state import MixedPrecisionError


def _regression_data(n=32):
    x = torch.linspace(-1, 1, n).unsqueeze(1)
    return TensorDataset(x, 2 * x + 1)


def _objects(lr=0.1):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(_regression_data(), batch_size=8, shuffle=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    return model, optimizer, loader, scheduler


def test_single_process_facts():
    accelerator = Accelerator()
    assert accelerator.device == torch.device("cpu")
    assert accelerator.num_processes == 1 and accelerator.process_index == 0
    assert accelerator.distributed_type is DistributedType.NO
    assert accelerator.is_main_process and accelerator.is_local_main_process and accelerator.is_last_process
    assert not accelerator.use_distributed
    assert accelerator.mixed_precision == "no" and accelerator.scaler is None
    assert accelerator.gradient_accumulation_steps == 1 and accelerator.sync_gradients


def test_prepare_returns_objects_in_order_with_their_wrappers():
    accelerator = Accelerator()
    model, optimizer, loader, scheduler = _objects()
    p_model, p_optimizer, p_loader, p_scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    assert p_model is model and not isinstance(p_model, DistributedDataParallel)
    assert isinstance(p_optimizer, AcceleratedOptimizer) and p_optimizer.optimizer is optimizer
    assert isinstance(p_loader, DataLoaderShard) and len(p_loader) == 4
    assert isinstance(p_scheduler, AcceleratedScheduler) and p_scheduler.scheduler is scheduler
    assert p_scheduler.optimizers == [p_optimizer]


def test_prepare_in_another_order_and_unknown_objects_pass_through():
    accelerator = Accelerator()
    model, optimizer, loader, scheduler = _objects()
    other = {"not": "prepared"}
    out = accelerator.prepare(scheduler, loader, other, optimizer, model)
    assert isinstance(out[0], AcceleratedScheduler)
    assert isinstance(out[1], DataLoaderShard)
    assert out[2] is other
    assert isinstance(out[3], AcceleratedOptimizer)
    assert out[4] is model


def test_prepare_of_one_object_returns_it_not_a_tuple():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    assert accelerator.prepare(model) is model
    assert isinstance(accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1)), AcceleratedOptimizer)


def test_prepare_rejects_a_device_placement_list_of_the_wrong_length():
    accelerator = Accelerator()
    with pytest.raises(ValueError, match="2 entries for 1 objects"):
        accelerator.prepare(torch.nn.Linear(1, 1), device_placement=[True, False])


def _train(accelerator, steps=20):
    set_seed(0)
    model, optimizer, loader, _ = _objects()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    while len(losses) < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def test_training_loop_reduces_the_loss():
    losses = _train(Accelerator())
    assert losses[-1] < 0.1 * losses[0]


def test_fp16_training_on_cpu_reduces_the_loss():
    accelerator = Accelerator(mixed_precision="fp16")
    assert isinstance(accelerator.scaler, torch.amp.GradScaler)
    losses = _train(accelerator, steps=30)
    assert losses[-1] < 0.2 * losses[0]
    assert accelerator.optimizer_step_was_skipped is False


def test_bf16_computes_inside_in_bf16_and_returns_fp32():
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    inner_dtypes = []
    model[0].register_forward_hook(lambda module, inputs, output: inner_dtypes.append(output.dtype))
    model = accelerator.prepare(model)
    out = model(torch.randn(2, 3))
    assert inner_dtypes == [torch.bfloat16]
    assert out.dtype == torch.float32
    with accelerator.autocast():
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16


def test_unwrap_model_without_fp32_wrapper_restores_forward():
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    dtypes = []
    model[0].register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    prepared = accelerator.prepare(model)
    assert accelerator.unwrap_model(prepared) is model
    prepared(torch.ones(1, 3))
    unwrapped = accelerator.unwrap_model(prepared, keep_fp32_wrapper=False)
    assert unwrapped is model and "forward" not in model.__dict__
    unwrapped(torch.ones(1, 3))
    assert dtypes == [torch.bfloat16, torch.float32]


def test_gather_for_metrics_over_a_full_eval_pass_returns_every_item():
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(10)), batch_size=4))
    gathered = [accelerator.gather_for_metrics(batch) for (batch,) in loader]
    assert torch.cat(gathered).tolist() == list(range(10))
    labels = [accelerator.gather_for_metrics([f"s{int(i)}" for i in batch]) for (batch,) in loader]
    assert [s for part in labels for s in part] == [f"s{i}" for i in range(10)]


def test_accumulate_toggles_sync_gradients():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(1, 1)
    flags = []
    for _ in range(4):
        with accelerator.accumulate(model):
            flags.append(accelerator.sync_gradients)
    assert flags == [False, True, False, True]


def test_accumulate_enters_every_models_no_sync_and_leaves_them_in_reverse(monkeypatch):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    events: list = []

    @contextlib.contextmanager
    def recording_no_sync(model):
        events.append(("enter", model))
        yield
        events.append(("leave", model))

    monkeypatch.setattr(accelerator.backend, "no_sync", recording_no_sync)
    first, second = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    with accelerator.accumulate(first, second):
        events.append("body")
    assert events == [("enter", first), ("enter", second), "body", ("leave", second), ("leave", first)]
    with accelerator.accumulate(first, second):  # the window's last step syncs: nothing entered
        assert accelerator.sync_gradients
    assert len(events) == 5


def test_accumulate_syncs_on_the_last_batch_of_the_loader():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(1, 1)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(5)), batch_size=1))
    flags = []
    for _ in loader:
        with accelerator.accumulate(model):
            flags.append(accelerator.sync_gradients)
    assert flags == [False, True, False, True, True]


def test_accumulation_restarts_with_each_pass_over_the_loader():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(1, 1)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(5)), batch_size=1))
    epochs = []
    for _ in range(2):
        flags = []
        for _ in loader:
            with accelerator.accumulate(model):
                flags.append(accelerator.sync_gradients)
        epochs.append(flags)
    assert epochs == [[False, True, False, True, True]] * 2


def test_optimizer_steps_only_on_sync_steps_while_accumulating():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(1, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    start = model.weight.item()
    weights = []
    for _ in range(4):
        train_steps(accelerator, model, optimizer, [torch.ones(1, 1)], lambda model, x: model(x).sum())
        weights.append(model.weight.item())
    # Two halves of d(w*1 + b)/dw = 1 accumulate into one step of lr * 1.
    assert weights == pytest.approx([start, start - 0.1, start - 0.1, start - 0.2])


def test_backward_divides_the_loss_by_the_accumulation_steps():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    reference = torch.nn.Linear(3, 1)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(4, 3)
    accelerator.backward(model(x).pow(2).mean())
    (reference(x).pow(2).mean() / 2).backward()
    assert torch.allclose(model.weight.grad, reference.weight.grad)
    assert torch.allclose(model.bias.grad, reference.bias.grad)


def test_clip_grad_norm_bounds_the_norm_and_returns_it_before_clipping():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    accelerator.backward((model(torch.full((2, 4), 100.0)) ** 2).sum())
    before = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    returned = accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)
    after = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert returned.item() == pytest.approx(before.item(), rel=1e-5)
    assert before > 1.0 and after.item() <= 1.0 + 1e-5


def test_clip_grad_norm_with_fp16_sees_unscaled_gradients():
    accelerator = Accelerator(mixed_precision="fp16")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    reference = torch.nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(3, 4)
    # Small enough that the first (largest) loss scale does not overflow fp16.
    accelerator.backward(model(x).sum() * 1e-3)
    (reference(x).sum() * 1e-3).backward()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=1e9)
    returned = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)
    assert returned.item() == pytest.approx(expected.item(), rel=1e-2)
    optimizer.step()
    assert not accelerator.optimizer_step_was_skipped


def test_clip_grad_value_clamps_gradients():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    accelerator.backward(model(torch.full((1, 2), 50.0)).sum())
    accelerator.clip_grad_value_(model.parameters(), 0.5)
    assert all(p.grad.abs().max() <= 0.5 for p in model.parameters())


def test_save_writes_a_loadable_file(tmp_path):
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 3))
    path = tmp_path / "model.pt"
    accelerator.save(accelerator.get_state_dict(model), path)
    loaded = torch.load(path, weights_only=True)
    assert set(loaded) == {"weight", "bias"}
    assert torch.equal(loaded["weight"], model.weight)


def test_invalid_mixed_precision_is_an_error():
    with pytest.raises(MixedPrecisionError, match="'fp8'"):
        Accelerator(mixed_precision="fp8")


@pytest.mark.parametrize("steps", [0, -1])
def test_non_positive_gradient_accumulation_steps_is_an_error(steps):
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        Accelerator(gradient_accumulation_steps=steps)


def test_gradient_accumulation_steps_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "3")
    assert Accelerator().gradient_accumulation_steps == 3


def test_reduce_and_gather_on_one_process():
    accelerator = Accelerator()
    tensor = torch.tensor([1.0, 2.0])
    assert accelerator.gather(tensor) is tensor
    assert accelerator.reduce(tensor, reduction="mean", scale=2.0).tolist() == [2.0, 4.0]
    assert accelerator.pad_across_processes(tensor) is tensor


def test_process_helpers_on_one_process(capsys):
    accelerator = Accelerator()
    accelerator.print("shown")
    ran = []
    accelerator.on_main_process(lambda: ran.append("main"))()
    accelerator.on_process(lambda: ran.append("one"), process_index=1)()
    with accelerator.main_process_first():
        ran.append("first")
    with accelerator.split_between_processes([1, 2, 3]) as share:
        ran.append(share)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    assert capsys.readouterr().out == "shown\n"
    assert ran == ["main", "first", [1, 2, 3]]


def test_scheduler_follows_the_optimizer_through_the_accelerator():
    accelerator = Accelerator()
    model, optimizer, loader, scheduler = _objects()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [pytest.approx(0.05)]


def test_an_accelerator_used_after_its_state_was_reset_says_so():
    from accel import AcceleratorState

    accelerator = Accelerator(cpu=True)
    AcceleratorState._reset_state()
    with pytest.raises(RuntimeError, match="state was reset.*build a new Accelerator"):
        _ = accelerator.device
    with pytest.raises(RuntimeError, match="state was reset"):
        accelerator.wait_for_everyone()
