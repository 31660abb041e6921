"""Train a small transformer with FSDP2 (`fully_shard`: parameters, gradients and optimizer state
sharded over the processes) with the same four-line loop, then save the full weights.

    accel launch --num_processes 2 examples/fsdp.py                      # transformer-based wrap
    accel launch --num_processes 2 examples/fsdp.py --wrap size --min_num_params 20000

Pure torch (no extra install). `FullyShardedDataParallelPlugin` shards each `TransformerEncoderLayer`
on its own (`TRANSFORMER_BASED_WRAP`), or each submodule above `--min_num_params` parameters
(`SIZE_BASED_WRAP`), then the whole model; the same choices are `accel launch --use_fsdp
--fsdp_auto_wrap_policy ...` flags for a script that builds no plugin. The task: say whether a
sequence of tokens holds more "low" tokens (below half the vocabulary) than high ones. At the end
`get_state_dict` gathers the full state dict on the main process, which writes
`OUTPUT_DIR/model.safetensors`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, FullyShardedDataParallelPlugin, set_seed


def make_datasets(size: int, length: int, vocab: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, eval) token sequences labelled 1 when most tokens are below vocab/2; an odd
    `length` leaves no ties. Identical on every rank (drawn from their own generator)."""
    generator = torch.Generator().manual_seed(seed)
    total = size + size // 4
    tokens = torch.randint(0, vocab, (total, length), generator=generator)
    labels = ((tokens < vocab // 2).sum(1) > length // 2).long()
    return TensorDataset(tokens[:size], labels[:size]), TensorDataset(tokens[size:], labels[size:])


class TinyTransformer(torch.nn.Module):
    """Token and position embeddings, `layers` encoder layers, mean pooling, a linear head."""

    def __init__(self, vocab: int, length: int, width: int, layers: int, classes: int = 2) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Parameter(torch.zeros(1, length, width))
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(
                width, nhead=4, dim_feedforward=2 * width, dropout=0.0, batch_first=True
            )
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.tokens(tokens) + self.positions
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(hidden.mean(dim=1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="runs/fsdp", help="the weights go here")
    parser.add_argument("--wrap", choices=["transformer", "size"], default="transformer")
    parser.add_argument("--min_num_params", type=int, default=20_000, help="for --wrap size")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dataset_size", type=int, default=1024)
    parser.add_argument("--length", type=int, default=15, help="tokens per sequence (odd)")
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--mixed_precision", default=None, help="no or bf16")
    args = parser.parse_args()
    for name in ("batch_size", "epochs", "dataset_size", "length", "vocab", "width", "layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.length % 2 == 0 or args.vocab < 2 or args.width % 4:
        parser.error("--length must be odd, --vocab at least 2 and --width a multiple of 4 (4 heads)")
    return args


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Return the loss and accuracy over the whole evaluation set (each sample counted once)."""
    model.eval()
    losses, correct = [], []
    with torch.no_grad():
        for tokens, labels in loader:
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
            loss, hits = accelerator.gather_for_metrics((loss, logits.argmax(-1) == labels))
            losses.append(loss)
            correct.append(hits)
    model.train()
    return {
        "eval_loss": torch.cat(losses).mean().item(),
        "accuracy": torch.cat(correct).float().mean().item(),
    }


def main() -> None:
    args = parse_args()
    if args.wrap == "transformer":
        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="TRANSFORMER_BASED_WRAP",
            transformer_cls_names_to_wrap=["TransformerEncoderLayer"],
        )
    else:
        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=args.min_num_params
        )
    accelerator = Accelerator(fsdp_plugin=plugin, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    train_set, eval_set = make_datasets(args.dataset_size, args.length, args.vocab, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size)
    model = TinyTransformer(args.vocab, args.length, args.width, args.layers)
    total_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )
    from torch.distributed.fsdp import FSDPModule

    sharded = [name or "<root>" for name, module in model.named_modules() if isinstance(module, FSDPModule)]
    # Each parameter is a DTensor: this rank keeps its shard (`to_local()`) between steps.
    local_params = sum(p.to_local().numel() for p in model.parameters())

    start = evaluate(accelerator, model, eval_loader)
    bar = tqdm(total=args.epochs * len(train_loader), disable=not accelerator.is_local_main_process)
    epoch_losses = []
    for _ in range(args.epochs):
        total = torch.zeros((), device=accelerator.device)
        for tokens, labels in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(tokens), labels)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.detach()
            bar.update(1)
        epoch_losses.append(accelerator.reduce(total / len(train_loader), reduction="mean").item())
        bar.set_postfix(loss=f"{epoch_losses[-1]:.4f}")
    bar.close()
    final = evaluate(accelerator, model, eval_loader)

    state_dict = accelerator.get_state_dict(model)  # collective: the full weights, on the main process
    weights = Path(args.output_dir) / "model.safetensors"
    if accelerator.is_main_process:
        weights.parent.mkdir(parents=True, exist_ok=True)
    accelerator.save(state_dict, weights, safe_serialization=True)
    locals_per_rank = accelerator.gather(torch.tensor([local_params], device=accelerator.device)).tolist()
    accelerator.print(
        json.dumps(
            {
                "distributed_type": str(accelerator.distributed_type),
                "sharded_modules": sharded,
                "initial_eval_loss": start["eval_loss"],
                "epoch_losses": epoch_losses,
                **final,
                "total_params": total_params,
                "local_params_per_rank": locals_per_rank,
                "weights": str(weights),
            }
        )
    )


if __name__ == "__main__":
    main()
