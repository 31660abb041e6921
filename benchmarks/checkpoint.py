"""Save and load time of a ~200 MB model with its AdamW state: save_state/load_state vs plain torch.

The baseline writes and reads the same state dicts with torch.save/torch.load(weights_only=True)
and loads them into the model and optimizer. save_state adds safetensors weights (or torch files
with safe_serialization=False, measured too), a content digest of every file (checked on every
load), the random states, JSON metadata and an atomic rename.
Both sides write a new folder for every save (see `Folders`). Target: both ratios <= 1.1.
Prints the best of `--repeats` alternating rounds of each, and the ratios.

    python benchmarks/checkpoint.py [--megabytes 200] [--repeats 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
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


def best_of_alternating(
    repeats: int, baseline: Callable[[], None], ours: Callable[[], None], between: Callable[[], None]
) -> tuple[float, float]:
    """Return the best time of each, measured in alternating rounds.

    Before each timed call, `between` tidies up and `os.sync` flushes dirty pages (neither is
    timed), so that the disk writing back one side's files does not slow down the other side.
    """
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for function, bucket in ((baseline, times[0]), (ours, times[1])):
            between()
            os.sync()
            started = time.perf_counter()
            function()
            bucket.append(time.perf_counter() - started)
    return min(times[0]), min(times[1])


class Folders:
    """A new folder for every save, as `checkpoint_<n>` saves have; only the newest of each kind is kept.

    Both sides write new files: on a VM, writing a new file can cost twice as much as overwriting
    one (the page cache needs fresh memory), and an atomic save can never overwrite in place.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0

    def new(self, kind: str) -> Path:
        self.count += 1
        return self.root / f"{kind}_{self.count:03d}"

    def newest(self, kind: str) -> Path:
        return sorted(self.root.glob(f"{kind}_*"))[-1]

    def keep_newest(self) -> None:
        for kind in {path.name.rsplit("_", 1)[0] for path in self.root.iterdir()}:
            for old in sorted(self.root.glob(f"{kind}_*"))[:-1]:
                shutil.rmtree(old)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="accel-ckpt-bench-", dir=args.dir))
    folders = Folders(root)
    try:
        with single_process_environment():
            accelerator, model, optimizer = make_objects(args.megabytes)
            size = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20

            def torch_save() -> None:
                folder = folders.new("torch")
                folder.mkdir()
                torch.save(model.state_dict(), folder / "model.bin")
                torch.save(optimizer.state_dict(), folder / "optimizer.bin")

            def torch_load() -> None:
                folder = folders.newest("torch")
                model.load_state_dict(torch.load(folder / "model.bin", weights_only=True))
                optimizer.load_state_dict(torch.load(folder / "optimizer.bin", weights_only=True))

            def measure(baseline: Callable[[], None], ours: Callable[[], None]) -> tuple[float, float]:
                return best_of_alternating(args.repeats, baseline, ours, folders.keep_newest)

            results = {
                "save": measure(torch_save, lambda: save_state(accelerator, folders.new("accel"))),
                "load": measure(torch_load, lambda: load_state(accelerator, folders.newest("accel"))),
                "save (safe_serialization=False)": measure(
                    torch_save, lambda: save_state(accelerator, folders.new("accelpt"), False)),
                "load (safe_serialization=False)": measure(
                    torch_load, lambda: load_state(accelerator, folders.newest("accelpt"))),
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
