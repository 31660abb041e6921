"""The same loop on an XLA device (TPU, or XLA's CPU device): variable-length sequences padded to
a few fixed lengths, so that XLA compiles a handful of graphs instead of one per batch.

    PJRT_DEVICE=CPU accel launch --xla --num_processes 1 examples/xla.py      # XLA's CPU device
    accel launch --xla --num_processes 8 examples/xla.py                      # on a TPU VM
    accel launch --num_processes 2 examples/xla.py                            # no XLA: CPUs or GPUs

XLA runs need torch_xla, with exactly the torch it was built for (torch 2.9.0, from PyTorch's CPU
index); from the repository root:

    pip install --index-url https://download.pytorch.org/whl/cpu torch==2.9.0 && \
        pip install -c constraints-xla.txt ./packages/accel-state ./packages/accel-data \
        ./packages/accel-amp ./packages/accel-launch ./packages/accel-big-modeling './packages/accel[xla]' \
        ./packages/accel-xla

Without it the script runs as any other example. When `accelerator.distributed_type` is
`DistributedType.XLA`, the collate function pads every batch to a multiple of
`--pad_to_multiple_of` tokens and the training loader drops its last, smaller batch: XLA compiles
one graph per set of shapes. Elsewhere batches are padded to their longest sequence only.

On XLA's CPU device the replicas are threads of one process sharing torch's random generator, so
the weights are drawn from a generator of their own (the same on every replica, as `set_seed`
gives separate processes). 2 CPU replicas hang when both compile the same collective graph at
once (pytorch/xla#9089), so `accel launch --xla --num_processes 2` refuses them there: run 1.
The final JSON line includes how many graphs XLA compiled.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from accel import Accelerator, DistributedType, set_seed

PAD = 0


class Sequences(Dataset):
    """Token sequences of odd lengths (tokens 1..vocab-1; 0 pads), labelled 1 when most tokens are
    below vocab/2. Identical on every rank (drawn from their own generator)."""

    def __init__(self, size: int, max_length: int, vocab: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        lengths = 2 * torch.randint(2, max_length // 2 + 1, (size,), generator=generator) - 1
        self.items = []
        for length in lengths.tolist():
            tokens = torch.randint(1, vocab, (length,), generator=generator)
            label = int((tokens < vocab // 2).sum() > length // 2)
            self.items.append((tokens, label))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.items[index]


def make_collate(multiple: int | None) -> Callable[[list[tuple[torch.Tensor, int]]], dict[str, torch.Tensor]]:
    """Return a collate function padding to the batch's longest sequence, rounded up to `multiple`."""

    def collate(batch: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
        longest = max(len(tokens) for tokens, _ in batch)
        if multiple:
            longest = -(-longest // multiple) * multiple
        tokens = torch.full((len(batch), longest), PAD, dtype=torch.long)
        for row, (sequence, _) in enumerate(batch):
            tokens[row, : len(sequence)] = sequence
        return {"tokens": tokens, "labels": torch.tensor([label for _, label in batch])}

    return collate


class BagOfEmbeddings(torch.nn.Module):
    """Mean of the tokens' embeddings (padding left out), then a small MLP."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, width, padding_idx=PAD)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, 2)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != PAD).unsqueeze(-1).float()
        pooled = (self.embedding(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.mlp(pooled)


def init_weights(model: torch.nn.Module, seed: int) -> None:
    """Draw every weight from a generator of its own: the same on every replica, even when the
    replicas are threads that share (and race on) torch's global generator."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            scale = parameter.shape[-1] ** -0.5 if parameter.ndim > 1 else 0.0
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
        model.embedding.weight[PAD].zero_()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--dataset_size", type=int, default=1024)
    parser.add_argument("--eval_size", type=int, default=256)
    parser.add_argument("--max_length", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--pad_to_multiple_of", type=int, default=16, help="on XLA: pad lengths to this")
    parser.add_argument("--mixed_precision", default=None)
    args = parser.parse_args()
    for name in ("batch_size", "epochs", "dataset_size", "eval_size", "width", "pad_to_multiple_of"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.max_length < 3 or args.vocab < 3:
        parser.error(f"--max_length and --vocab must be at least 3, got {args.max_length} and {args.vocab}")
    return args


def compiled_graphs() -> int | None:
    """Return how many graphs XLA compiled in this process so far (None when not on XLA)."""
    import torch_xla.debug.metrics as metrics

    data = metrics.metric_data("CompileTime")
    return int(data[0]) if data else 0


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Return the loss and accuracy over the whole evaluation set (each sample counted once)."""
    model.eval()
    losses, correct = [], []
    with torch.no_grad():
        for batch in loader:
            logits = model(batch["tokens"])
            loss = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
            loss, hits = accelerator.gather_for_metrics((loss, logits.argmax(-1) == batch["labels"]))
            losses.append(loss.cpu())
            correct.append(hits.cpu())
    model.train()
    return {
        "eval_loss": torch.cat(losses).mean().item(),
        "accuracy": torch.cat(correct).float().mean().item(),
    }


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    on_xla = accelerator.distributed_type == DistributedType.XLA
    set_seed(args.seed)
    collate = make_collate(args.pad_to_multiple_of if on_xla else None)
    train_set = Sequences(args.dataset_size, args.max_length, args.vocab, seed=args.seed)
    eval_set = Sequences(args.eval_size, args.max_length, args.vocab, seed=args.seed + 1)
    # On XLA a smaller last batch would be a new shape, so one more graph: drop it.
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, collate_fn=collate, drop_last=on_xla
    )
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size, collate_fn=collate)
    model = BagOfEmbeddings(args.vocab, args.width)
    init_weights(model, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    start = evaluate(accelerator, model, eval_loader)
    bar = tqdm(total=args.epochs * len(train_loader), disable=not accelerator.is_local_main_process)
    epoch_losses = []
    lengths: set[int] = set()
    for _ in range(args.epochs):
        total = torch.zeros((), device=accelerator.device)
        for batch in train_loader:
            lengths.add(batch["tokens"].shape[1])
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch["tokens"]), batch["labels"])
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()  # stays on the device: no host sync per step
            bar.update(1)
        epoch_losses.append(accelerator.reduce(total / len(train_loader), reduction="mean").item())
        bar.set_postfix(loss=f"{epoch_losses[-1]:.4f}")
    bar.close()
    final = evaluate(accelerator, model, eval_loader)
    accelerator.print(
        json.dumps(
            {
                "distributed_type": str(accelerator.distributed_type),
                "num_processes": accelerator.num_processes,
                "device": accelerator.device.type,
                "padded_lengths": sorted(lengths),
                "initial_eval_loss": start["eval_loss"],
                "epoch_losses": epoch_losses,
                **final,
                "compiled_graphs": compiled_graphs() if on_xla else None,
            }
        )
    )


if __name__ == "__main__":
    main()
