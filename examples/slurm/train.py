"""A small classifier trained with AdamW on a shuffled loader: the same script under SLURM or `accel launch`.

    srun -n 2 python examples/slurm/train.py --save_weights weights.pt
    sbatch examples/slurm/train.sbatch
    accel launch --cpu --num_processes 2 examples/slurm/train.py --save_weights weights.pt

Nothing in it names SLURM: the Accelerator reads its rank and world size from `srun`'s variables
(SLURM_PROCID, SLURM_STEP_NUM_TASKS) or from `accel launch`'s, so every way of starting it forms the
same world and, with the same seed, ends with the same weights. `--die_on_rank R` makes rank R kill
itself with SIGKILL halfway through, to see how the job ends when a task dies.
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, set_seed


def make_dataset(size: int, seed: int) -> TensorDataset:
    """Two Gaussian blobs in 8 dimensions, drawn from their own generator so every rank holds the same."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (size,), generator=generator)
    features = torch.randn(size, 8, generator=generator) + labels[:, None].float()
    return TensorDataset(features, labels)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--dataset_size", type=int, default=512)
    parser.add_argument("--save_weights", default=None, help="save the final state dict here")
    parser.add_argument("--die_on_rank", type=int, default=None, help="this rank kills itself mid-training")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    accelerator = Accelerator()
    accelerator.print(f"world of {accelerator.num_processes} process(es)")
    print(f"rank {accelerator.process_index} of {accelerator.num_processes}", flush=True)
    set_seed(args.seed)
    loader = DataLoader(make_dataset(args.dataset_size, args.seed), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        for step, (features, labels) in enumerate(loader):
            if epoch == args.epochs // 2 and step == 0 and accelerator.process_index == args.die_on_rank:
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(features), labels)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch}: loss {accelerator.reduce(loss.detach(), 'mean').item():.6f}")

    if args.save_weights:
        accelerator.save(accelerator.unwrap_model(model).state_dict(), args.save_weights)
    accelerator.end_training()


if __name__ == "__main__":
    main()
