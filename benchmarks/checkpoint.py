"""Save and load time of a ~200 MB model with its AdamW state: save_state/load_state vs plain torch.

The baseline writes and reads the same state dicts with torch.save/torch.load(weights_only=True)
and loads them into the model and optimizer. save_state adds safetensors weights (or torch files
with safe_serialization=False, measured too), a content digest of every file (checked on every
load), the random states, JSON metadata and an atomic rename.
Target: both ratios <= 1.1. Prints the best of `--repeats` runs of each, and the ratios.

    python benchmarks/checkpoint.py [--megabytes 200] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from accel import Accelerator
from accel.checkpointing import load_state, save_state
from accel_state.testing import single_process_environment


def make_objects(megabytes: int) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer]:
    accelerator = Accelerator(cpu=True)
    width = 2048
    layers = max(1, megabytes * 2**20 // (width * width * 4))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()  # AdamW now holds exp_avg and exp_avg_sq: twice the model's size
    optimizer.zero_grad()
    return accelerator, model, optimizer


def best_of(repeats: int, function: Callable[[], None]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="accel-ckpt-bench-", dir=args.dir))
    try:
        with single_process_environment():
            accelerator, model, optimizer = make_objects(args.megabytes)
            size = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
            plain = root / "plain"
            plain.mkdir()

            def torch_save() -> None:
                torch.save(model.state_dict(), plain / "model.bin")
                torch.save(optimizer.state_dict(), plain / "optimizer.bin")

            def torch_load() -> None:
                model.load_state_dict(torch.load(plain / "model.bin", weights_only=True))
                optimizer.load_state_dict(torch.load(plain / "optimizer.bin", weights_only=True))

            accel_dir, torch_format_dir = root / "accel", root / "accel-torch-format"
            results = {
                "save": (best_of(args.repeats, torch_save),
                         best_of(args.repeats, lambda: save_state(accelerator, accel_dir))),
                "load": (best_of(args.repeats, torch_load),
                         best_of(args.repeats, lambda: load_state(accelerator, accel_dir))),
                "save (safe_serialization=False)": (
                    best_of(args.repeats, torch_save),
                    best_of(args.repeats, lambda: save_state(accelerator, torch_format_dir, False))),
                "load (safe_serialization=False)": (
                    best_of(args.repeats, torch_load),
                    best_of(args.repeats, lambda: load_state(accelerator, torch_format_dir))),
            }  # fmt: skip
        print(f"model {size:.0f} MiB + AdamW state ({3 * size:.0f} MiB in all), best of {args.repeats}")
        for name, (baseline, ours) in results.items():
            print(
                f"{name}: torch {baseline:.3f} s, accel {ours:.3f} s, "
                f"ratio {ours / baseline:.2f} (target <= 1.1)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
