"""Precision policies on CPU: autocast inside forward, fp32 outside, and fp16 loss scaling."""

from __future__ import annotations

import copy

import pytest
import torch

from accel_amp import Bf16Policy, Fp16Policy, PrecisionPolicy, convert_to_fp32, precision_policy

CPU = torch.device("cpu")


def _model_with_probe():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    seen = []
    model[0].register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    return model, seen


def test_no_policy_changes_nothing():
    policy = precision_policy("no", CPU)
    assert type(policy) is PrecisionPolicy
    assert policy.scaler is None
    model, seen = _model_with_probe()
    assert policy.wrap_forward(model) is model
    assert "forward" not in model.__dict__
    with policy.autocast():
        assert model(torch.randn(2, 4)).dtype == torch.float32
    assert seen == [torch.float32]
    loss = torch.tensor(2.0)
    assert policy.scale_loss(loss) is loss


def test_bf16_forward_computes_in_bf16_and_returns_fp32():
    policy = precision_policy("bf16", CPU)
    assert isinstance(policy, Bf16Policy) and policy.scaler is None
    model, seen = _model_with_probe()
    policy.wrap_forward(model)
    out = model(torch.randn(2, 4))
    assert seen == [torch.bfloat16]
    assert out.dtype == torch.float32
    assert model.forward.__name__ == "forward"


def test_unwrap_forward_restores_full_precision():
    policy = precision_policy("bf16", CPU)
    model, seen = _model_with_probe()
    policy.wrap_forward(model)
    policy.wrap_forward(model)  # idempotent: one unwrap undoes it
    PrecisionPolicy.unwrap_forward(model)
    assert "forward" not in model.__dict__
    assert model(torch.randn(2, 4)).dtype == torch.float32
    assert seen == [torch.float32]
    assert PrecisionPolicy.unwrap_forward(model) is model  # a second unwrap is harmless


def test_unwrap_forward_restores_a_user_assigned_forward():
    policy = precision_policy("bf16", CPU)
    model = torch.nn.Linear(2, 2)

    def custom_forward(x):
        return x * 3

    model.forward = custom_forward
    policy.wrap_forward(model)
    assert model(torch.ones(1)).tolist() == [3.0]
    PrecisionPolicy.unwrap_forward(model)
    assert model.forward is custom_forward


def test_autocast_can_be_disabled():
    policy = precision_policy("bf16", CPU)
    linear = torch.nn.Linear(2, 2)
    with policy.autocast():
        assert linear(torch.ones(1, 2)).dtype == torch.bfloat16
    with policy.autocast(enabled=False):
        assert linear(torch.ones(1, 2)).dtype == torch.float32


def test_fp16_policy_has_a_grad_scaler_and_scales_the_loss():
    policy = precision_policy("fp16", CPU)
    assert isinstance(policy, Fp16Policy)
    assert isinstance(policy.scaler, torch.amp.GradScaler)
    assert policy.scale_loss(torch.tensor(1.0)).item() == policy.scaler.get_scale() > 1
    model, seen = _model_with_probe()
    policy.wrap_forward(model)
    assert model(torch.randn(2, 4)).dtype == torch.float32
    assert seen == [torch.float16]


def test_fp16_scaler_arguments_are_forwarded():
    policy = precision_policy("fp16", CPU, init_scale=8.0)
    assert policy.scale_loss(torch.tensor(1.0)).item() == 8.0


@pytest.mark.parametrize("mode", ["fp8", "FP16", ""])
def test_invalid_mode_is_an_error(mode):
    with pytest.raises(ValueError, match=repr(mode)):
        precision_policy(mode, CPU)


def test_convert_to_fp32_upcasts_half_tensors_only():
    data = {
        "h": torch.ones(1, dtype=torch.float16),
        "b": [torch.ones(1, dtype=torch.bfloat16)],
        "d": torch.ones(1, dtype=torch.float64),
        "i": torch.ones(1, dtype=torch.int64),
        "s": "text",
    }
    out = convert_to_fp32(data)
    assert out["h"].dtype == out["b"][0].dtype == torch.float32
    assert out["d"].dtype == torch.float64 and out["i"].dtype == torch.int64
    assert out["s"] == "text"


def test_deepcopy_of_a_wrapped_model_computes_with_the_copys_weights():
    # EMA / teacher models are often deep copies of the prepared model.
    model = torch.nn.Linear(2, 1)
    precision_policy("bf16", CPU).wrap_forward(model)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.zero_()
    assert clone(torch.ones(1, 2)).item() == 0.0
    assert model(torch.ones(1, 2)).dtype == torch.float32


@pytest.mark.parametrize("mode", ["no", "bf16"])
def test_a_policy_without_a_scaler_keeps_the_protocols_promise(mode):
    # The backends skip scale_loss and optimizer_step when scaler is None: both must be pass-throughs.
    policy = precision_policy(mode, CPU)
    assert policy.scaler is None
    loss = torch.tensor(2.0, requires_grad=True)
    assert policy.scale_loss(loss) is loss
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    weight.grad = torch.ones(2)
    result, skipped = policy.optimizer_step(optimizer, lambda: 7.0)
    assert (result, skipped) == (7.0, False)
    assert weight.detach().tolist() == [0.5, 0.5]
