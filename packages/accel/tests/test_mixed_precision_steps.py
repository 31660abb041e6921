"""fp16 and bf16 end to end on the CPU: what runs in low precision, what stays fp32, what skips."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator


def _prepared(mixed_precision, optimizer_kwargs=None, optimizer_class=torch.optim.SGD):
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision=mixed_precision)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = optimizer_class(model.parameters(), lr=0.1, **(optimizer_kwargs or {}))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler)


@pytest.mark.parametrize("mode, low", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_layers_compute_in_low_precision_while_outputs_and_master_weights_stay_fp32(mode, low):
    accelerator, model, optimizer, _ = _prepared(mode)
    seen = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    out = model(torch.randn(3, 4))
    assert seen == [low]
    assert out.dtype == torch.float32
    accelerator.backward(out.pow(2).mean())
    optimizer.step()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with accelerator.autocast():
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == low


@pytest.mark.parametrize(
    "optimizer_class, kwargs",
    [(torch.optim.SGD, {}), (torch.optim.Adam, {"foreach": True}), (torch.optim.Adam, {"fused": True})],
)
def test_forced_overflow_skips_the_step_and_leaves_weights_and_schedule(optimizer_class, kwargs):
    accelerator, model, optimizer, scheduler = _prepared("fp16", kwargs, optimizer_class)
    before = [p.detach().clone() for p in model.parameters()]
    lr_before = scheduler.get_last_lr()
    accelerator.backward(model(torch.randn(3, 4)).mean())
    model[0].weight.grad[0, 0] = float("inf")
    optimizer.step()
    scheduler.step()
    assert accelerator.optimizer_step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scheduler.get_last_lr() == lr_before
    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(3, 4)).mean())
    optimizer.step()
    scheduler.step()
    assert not accelerator.optimizer_step_was_skipped
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scheduler.get_last_lr() == [lr_before[0] * 0.5]


def test_clipping_under_fp16_bounds_the_true_gradient_norm():
    accelerator, model, optimizer, _ = _prepared("fp16")
    x = torch.randn(16, 4)
    for _ in range(30):  # the first steps overflow until the scaler has lowered its scale
        optimizer.zero_grad()
        accelerator.backward((model(x) - 10).pow(2).mean())
        before_clipping = accelerator.clip_grad_norm_(model.parameters(), max_norm=0.5)
        if torch.isfinite(before_clipping):
            break
        optimizer.step()
        assert accelerator.optimizer_step_was_skipped
    assert before_clipping > 0.5, "the test needs gradients larger than the bound"
    norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm <= 0.5 + 1e-4
    optimizer.step()  # unscaled once already: stepping must not unscale again
    assert not accelerator.optimizer_step_was_skipped


@pytest.mark.parametrize("mode", ["no", "bf16", "fp16"])
def test_backward_counts_itself_so_zero_grad_keeps_pending_gradients(mode):
    # The optimizer's zero_grad keeps gradients no step applied yet only if backward was counted.
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision=mode, gradient_accumulation_steps=2)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = accelerator.gradient_state.backward_calls
    with accelerator.accumulate(model):  # the window's first micro-step: no sync, no step
        accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    assert accelerator.gradient_state.backward_calls == before + 1
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    with accelerator.accumulate(model):  # the window's last: it steps, then clears
        accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("mode", ["no", "bf16", "fp16"])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_direct_backward_and_step_train_to_the_weights_of_the_backends(mode, accumulation):
    # Without a scaler the facade divides the loss over the window and calls its backward() itself,
    # and the optimizer wrapper calls optimizer.step(); through the backend both must give the same
    # weights, bit for bit.
    def train(direct: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        accelerator = Accelerator(mixed_precision=mode, gradient_accumulation_steps=accumulation)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.1))
        assert accelerator._plain_backward is optimizer._plain_step is (mode != "fp16")
        accelerator._plain_backward = optimizer._plain_step = direct and mode != "fp16"
        for _ in range(4):
            with accelerator.accumulate(model):
                accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
                optimizer.step()
                optimizer.zero_grad()
        return [parameter.detach().clone() for parameter in model.parameters()]

    for direct, through_backend in zip(train(True), train(False), strict=True):
        assert torch.equal(direct, through_backend)
