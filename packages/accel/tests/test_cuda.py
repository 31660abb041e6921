"""The same guarantees on a CUDA GPU; skipped, with the reason, where there is none."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none is visible)")


def test_model_and_batches_land_on_the_gpu():
    accelerator = Accelerator()
    loader = torch.utils.data.DataLoader(torch.arange(8.0).view(4, 2), batch_size=2)
    model, loader = accelerator.prepare(torch.nn.Linear(2, 1), loader)
    assert accelerator.device.type == "cuda"
    assert next(model.parameters()).is_cuda
    assert all(batch.is_cuda for batch in loader)


@pytest.mark.parametrize("mode, low", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_mixed_precision_on_the_gpu(mode, low):
    accelerator = Accelerator(mixed_precision=mode)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    seen = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    x = torch.randn(32, 8, device=accelerator.device)
    first = None
    for _ in range(20):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        first = loss.item() if first is None else first
        assert loss.dtype == torch.float32
        accelerator.backward(loss)
        optimizer.step()
    assert seen[0] == low
    assert loss.item() < first
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_fp16_overflow_is_skipped_on_the_gpu():
    accelerator = Accelerator(mixed_precision="fp16")
    model = torch.nn.Linear(4, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    accelerator.backward(model(torch.randn(2, 4, device=accelerator.device)).sum())
    model.weight.grad[0, 0] = float("inf")
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert torch.equal(before, model.weight)
