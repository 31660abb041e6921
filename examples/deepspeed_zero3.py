"""Train with DeepSpeed ZeRO-3 (parameters, gradients and optimizer state partitioned over the
processes) with the same four-line loop, then save the consolidated weights.

    accel launch --num_processes 2 examples/deepspeed_zero3.py            # the plugin below
    accel launch --num_processes 2 --use_deepspeed --zero_stage 3 examples/deepspeed_zero3.py

Needs DeepSpeed; from the repository root:

    pip install -c constraints.txt ./packages/accel-state ./packages/accel-data ./packages/accel-amp \
        ./packages/accel-launch ./packages/accel-big-modeling './packages/accel[deepspeed]' \
        ./packages/accel-deepspeed deepspeed==0.19.8

Without a GPU (or with `accel launch --cpu`)
DeepSpeed runs on its CPU accelerator: the launcher and the Accelerator set `DS_ACCELERATOR=cpu`
unless it is set already. The script asks for ZeRO-3 with `DeepSpeedPlugin(zero_stage=3)`; a launch
flag or a DeepSpeed JSON (`--deepspeed_config_file`) that says otherwise is an error naming both.
The engine owns backward, gradient reduction, clipping and the step; `prepare` fills the JSON's
batch sizes from the loader. At the end `save_model` writes the full (gathered, fp32) weights as
`OUTPUT_DIR/model.safetensors` from the main process.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, DeepSpeedPlugin, set_seed


def make_datasets(size: int, features: int, classes: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, eval) points around `classes` random centres, identical on every rank (drawn
    from their own generator); the evaluation set has a quarter of `size` points."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=generator)
    total = size + size // 4
    labels = torch.randint(0, classes, (total,), generator=generator)
    points = centres[labels] + torch.randn(total, features, generator=generator)
    return TensorDataset(points[:size], labels[:size]), TensorDataset(points[size:], labels[size:])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="runs/deepspeed_zero3", help="the weights go here")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dataset_size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gradient_clipping", type=float, default=1.0)
    parser.add_argument("--mixed_precision", default=None, help="no or bf16 (fp16 needs a GPU)")
    args = parser.parse_args()
    for name in ("batch_size", "epochs", "dataset_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Return the loss and accuracy over the whole evaluation set (each sample counted once)."""
    model.eval()
    dtype = next(model.parameters()).dtype  # a bf16 engine computes in bf16
    losses, correct = [], []
    with torch.no_grad():
        for points, labels in loader:
            logits = model(points.to(dtype)).float()
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
    plugin = DeepSpeedPlugin(zero_stage=3, gradient_clipping=args.gradient_clipping)
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    features, classes = 16, 4
    train_set, eval_set = make_datasets(args.dataset_size, features, classes, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, args.hidden),
        torch.nn.GELU(),
        torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.GELU(),
        torch.nn.Linear(args.hidden, classes),
    )
    total_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )
    # ZeRO-3 keeps only this rank's partition of each parameter (`ds_tensor`) between steps.
    local_params = sum(p.ds_tensor.numel() for p in model.parameters() if hasattr(p, "ds_tensor"))

    start = evaluate(accelerator, model, eval_loader)
    dtype = next(model.parameters()).dtype
    bar = tqdm(total=args.epochs * len(train_loader), disable=not accelerator.is_local_main_process)
    epoch_losses = []
    for _ in range(args.epochs):
        total = torch.zeros((), device=accelerator.device)
        for points, labels in train_loader:
            loss = torch.nn.functional.cross_entropy(model(points.to(dtype)).float(), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.detach()
            bar.update(1)
        epoch_losses.append(accelerator.reduce(total / len(train_loader), reduction="mean").item())
        bar.set_postfix(loss=f"{epoch_losses[-1]:.4f}")
    bar.close()
    final = evaluate(accelerator, model, eval_loader)

    # Collective: every rank gives its partitions, the main process writes the whole model.
    accelerator.save_model(model, args.output_dir)
    accelerator.wait_for_everyone()
    locals_per_rank = accelerator.gather(torch.tensor([local_params], device=accelerator.device)).tolist()
    accelerator.print(
        json.dumps(
            {
                "zero_stage": accelerator.deepspeed_plugin.zero_stage,
                "initial_eval_loss": start["eval_loss"],
                "epoch_losses": epoch_losses,
                **final,
                "total_params": total_params,
                "partitioned_params_per_rank": locals_per_rank,
                "weights": str(Path(args.output_dir) / "model.safetensors"),
            }
        )
    )


if __name__ == "__main__":
    main()
