"""Context parallel on 2 CUDA GPUs: a causal attention model trained with its sequences split over
the `cp` ranks (ring attention inside `accelerator.maybe_context_parallel`) takes the same step as
the model trained on whole sequences. torch's context parallel has CUDA kernels only: skipped, with
the reason, on a machine with fewer than two GPUs; the CPU refusal is tested in the config tests."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="context parallel needs 2 CUDA GPUs"),
]

VOCAB, WIDTH, HEADS, SEQUENCE = 32, 32, 4, 64


class CausalLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        batch, length, _ = x.shape
        q, k, v = (t.view(batch, length, HEADS, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(x + self.out(y.transpose(1, 2).reshape(batch, length, WIDTH)))


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def step_with_context_parallel() -> dict:
    from accel import Accelerator, ParallelismConfig

    accelerator = Accelerator(parallelism_config=ParallelismConfig(cp_size=2))
    torch.manual_seed(0)
    model = CausalLM()
    reference = CausalLM().to(accelerator.device)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, SEQUENCE + 1), generator=generator).to(accelerator.device)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    expected_loss = _loss(reference(inputs), labels)
    expected_loss.backward()
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    with accelerator.maybe_context_parallel(
        buffers=[inputs, labels], buffer_seq_dims=[1, 1], no_restore_buffers={inputs, labels}
    ):
        local_length = inputs.shape[1]
        loss = _loss(model(inputs), labels)
        accelerator.backward(loss)
    optimizer.step()
    full = accelerator.get_state_dict(model)
    expected = reference.state_dict()
    mesh = accelerator.torch_device_mesh
    return {
        "local_length": local_length,
        "loss": float(accelerator.reduce(loss.detach(), "mean")),
        "expected_loss": float(expected_loss),
        "difference": max(
            float((full[k].to(expected[k].device) - expected[k]).abs().max()) for k in expected
        ),
        "mesh": dict(zip(mesh.mesh_dim_names, mesh.shape, strict=True)),
    }


def test_a_step_on_split_sequences_equals_the_step_on_whole_ones():
    for rank, result in enumerate(run_on_ranks(step_with_context_parallel, 2, cpu=False, timeout=300)):
        assert result["local_length"] == SEQUENCE // 2, f"rank {rank} must hold half of each sequence"
        assert result["mesh"]["cp"] == 2, result["mesh"]
        assert result["loss"] == pytest.approx(result["expected_loss"], rel=1e-4), result
        assert result["difference"] <= 1e-4, f"rank {rank}: weights differ by {result['difference']}"
