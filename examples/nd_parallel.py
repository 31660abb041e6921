"""Train a small causal language model over an N-D device mesh: FSDP2 shards x tensor parallel x
replicas, with the same four-line loop.

    accel launch --num_processes 4 --use_parallelism_config \\
        --parallelism_config_dp_shard_size 2 --parallelism_config_tp_size 2 examples/nd_parallel.py
    accel launch --num_processes 4 examples/nd_parallel.py --dp_replicate_size 2 --tp_size 2

Pure torch (no extra install). The mesh comes from the launcher's flags, or from a
`ParallelismConfig` the script builds from its own flags. The model carries its tensor parallel
plan as transformers' models do (`TinyCausalLM.tp_plan`: module-name patterns -> "colwise" /
"rowwise"): each attention's projections and each MLP are split over the `tp` ranks, then every
parameter is sharded over `dp_shard` (and kept in step across `dp_replicate`). Ranks of one
tensor parallel group read the same batches; the data is split over the data parallel ranks. The
task: continue sequences that count up modulo the vocabulary. At the end `get_state_dict` gathers
the full weights on the main process, which writes `OUTPUT_DIR/model.safetensors`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, ParallelismConfig, set_seed


def make_datasets(size: int, length: int, vocab: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, eval): sequences start - start + length (mod vocab), inputs and next tokens."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (size + size // 4, 1), generator=generator)
    tokens = (starts + torch.arange(length + 1)) % vocab
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    return TensorDataset(inputs[:size], targets[:size]), TensorDataset(inputs[size:], targets[size:])


class Attention(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.head_dim = width // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            torch.nn.Linear(width, width, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # -1: under tensor parallel a rank holds some heads
            return t.view(batch, length, -1, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(batch, length, -1))


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention_norm, self.mlp_norm = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.up_proj, self.down_proj = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.down_proj(torch.nn.functional.gelu(self.up_proj(self.mlp_norm(x))))


class TinyCausalLM(torch.nn.Module):
    """Token and position embeddings, `layers` blocks, a head tied to the token embedding."""

    tp_plan = {
        "layers.*.attention.q_proj": "colwise",
        "layers.*.attention.k_proj": "colwise",
        "layers.*.attention.v_proj": "colwise",
        "layers.*.attention.o_proj": "rowwise",
        "layers.*.up_proj": "colwise",
        "layers.*.down_proj": "rowwise",
    }

    def __init__(self, vocab: int, length: int, width: int, layers: int, heads: int = 4) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Parameter(torch.zeros(1, length, width))
        self.layers = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.tokens(tokens) + self.positions[:, : tokens.shape[1]]
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(self.norm(hidden))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp_replicate_size", type=int, default=None)
    parser.add_argument("--dp_shard_size", type=int, default=None)
    parser.add_argument("--tp_size", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output_dir", type=Path, default=Path("runs/nd_parallel"))
    args = parser.parse_args()
    sizes = {
        "dp_replicate_size": args.dp_replicate_size,
        "dp_shard_size": args.dp_shard_size,
        "tp_size": args.tp_size,
    }
    # No size given: the launcher's --use_parallelism_config flags (or none) decide.
    config = ParallelismConfig(**sizes) if any(v is not None for v in sizes.values()) else None
    accelerator = Accelerator(parallelism_config=config)
    set_seed(0)
    vocab, length = 32, 12
    train, evaluation = make_datasets(512, length, vocab, seed=0)
    model = TinyCausalLM(vocab, length, width=64, layers=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train_loader = DataLoader(train, batch_size=16, shuffle=True)
    eval_loader = DataLoader(evaluation, batch_size=16)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))

    epoch_losses = []
    for _ in range(args.epochs):
        model.train()
        total, batches = 0.0, 0
        for x, y in train_loader:
            loss = loss_of(x, y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            total, batches = total + float(loss), batches + 1
        epoch_losses.append(total / batches)
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for x, y in eval_loader:
            predictions = accelerator.gather_for_metrics(model(x).argmax(-1))
            targets = accelerator.gather_for_metrics(y)
            correct += int((predictions == targets).sum())
            seen += targets.numel()
    weights = accelerator.get_state_dict(model)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    per_rank = accelerator.gather(torch.tensor([local])).tolist()
    if accelerator.is_main_process:
        from safetensors.torch import save_file

        args.output_dir.mkdir(parents=True, exist_ok=True)
        path = args.output_dir / "model.safetensors"
        unique = {k: v.contiguous() for k, v in weights.items() if k != "head.weight"}  # tied: stored once
        save_file(unique, str(path))
        mesh = accelerator.torch_device_mesh
        print(
            json.dumps(
                {
                    "accuracy": correct / seen,
                    "eval_tokens": seen,
                    "epoch_losses": epoch_losses,
                    "mesh": dict(zip(mesh.mesh_dim_names, mesh.mesh.shape, strict=False)),
                    "distributed_type": accelerator.distributed_type.value,
                    "local_params_per_rank": per_rank,
                    "total_params": sum(t.numel() for t in unique.values()),
                    "weights": str(path),
                }
            )
        )


if __name__ == "__main__":
    main()
