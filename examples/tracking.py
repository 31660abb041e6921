"""Log a training run to TensorBoard and to a JSON-lines file: `Accelerator(log_with=...)`,
`init_trackers`, `accelerator.log(values, step=...)` and `end_training`.

    pip install -c constraints.txt ./packages/accel-state ./packages/accel-data ./packages/accel-amp \
        ./packages/accel-launch ./packages/accel-big-modeling ./packages/accel \
        transformers==5.24.0 tqdm tensorboard
    accel launch --num_processes 2 examples/tracking.py --output_dir runs/tracking
    tensorboard --logdir runs/tracking        # or: accel plot runs/tracking/tracking -o curves.png

What a run writes (only the main process writes; `--run_name` defaults to "tracking"):

    OUTPUT_DIR/RUN_NAME/metrics.jsonl           one {"step": s, "values": {...}} per log call
    OUTPUT_DIR/RUN_NAME/config.json             the hyperparameters given to init_trackers
    OUTPUT_DIR/RUN_NAME/events.out.tfevents.*   the same scalars, for TensorBoard
    OUTPUT_DIR/RUN_NAME/<time>/events.*         the hyperparameters (TensorBoard's hparams tab)

The step is the optimizer step. Every `--logging_steps` steps it logs `train_loss` (the mean over
the processes) and `lr`; after each epoch `eval_loss`, `accuracy` and `epoch`. `--report_to` takes
any tracker names accel knows (tensorboard, jsonl, wandb, mlflow, ...; "all": every installed one);
a tracker whose package is missing is an error naming the package.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, set_seed


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
    parser.add_argument("--output_dir", default="runs/tracking", help="the logging directory")
    parser.add_argument("--run_name", default="tracking", help="the run's folder under --output_dir")
    parser.add_argument(
        "--report_to", default="tensorboard,jsonl", help="comma-separated tracker names, or all"
    )
    parser.add_argument("--logging_steps", type=int, default=5, help="log the training loss every N steps")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dataset_size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mixed_precision", default=None)
    args = parser.parse_args()
    for name in ("logging_steps", "batch_size", "epochs", "dataset_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    args.report_to = [name.strip() for name in args.report_to.split(",") if name.strip()]
    if not args.report_to:
        parser.error("--report_to names no tracker")
    return args


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Return the loss and accuracy over the whole evaluation set (each sample counted once)."""
    model.eval()
    losses, correct = [], []
    with torch.no_grad():
        for points, labels in loader:
            logits = model(points)
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
    accelerator = Accelerator(
        log_with=args.report_to, project_dir=args.output_dir, mixed_precision=args.mixed_precision
    )
    set_seed(args.seed)
    features, classes = 16, 4
    train_set, eval_set = make_datasets(args.dataset_size, features, classes, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size)
    model = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # Written for one process: the prepared scheduler advances once per process at each step.
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    accelerator.init_trackers(args.run_name, config=vars(args))

    step, logged = 0, 0
    metrics: dict[str, float] = {}
    bar = tqdm(total=args.epochs * len(train_loader), disable=not accelerator.is_local_main_process)
    for epoch in range(args.epochs):
        for points, labels in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(points), labels)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            step += 1
            bar.update(1)
            if step % args.logging_steps == 0:
                train_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
                accelerator.log({"train_loss": train_loss, "lr": scheduler.get_last_lr()[0]}, step=step)
                logged += 1
                bar.set_postfix(loss=f"{train_loss:.4f}")
        metrics = evaluate(accelerator, model, eval_loader)
        accelerator.log({**metrics, "epoch": epoch}, step=step)
        logged += 1
    bar.close()
    accelerator.end_training()  # closes the files: every line is on disk

    run_dir = Path(args.output_dir) / args.run_name
    accelerator.print(json.dumps({**metrics, "steps": step, "log_calls": logged, "run_dir": str(run_dir)}))


if __name__ == "__main__":
    main()
