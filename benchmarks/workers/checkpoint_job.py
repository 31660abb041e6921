"""One model size of the checkpoint figure, in one fresh process: save and load seconds per round.

    python checkpoint_job.py --contenders raw,accel --megabytes 100 --rounds 5 --repeats 1 --dir DIR

One model (Linear layers of width 1024) with AdamW stepped once (its two moments: twice the
model's size), shared by every contender:
- raw: `torch.save` of the model's and the optimizer's state dicts into a new folder, and
  `torch.load(weights_only=True)` + `load_state_dict` of both;
- accel / accelerate: `accelerator.save_state(folder)` / `load_state(folder)`, each library
  having prepared the same model and optimizer (safetensors weights, RNG states, metadata).
Each round runs every contender (save, then load of what it just saved, `--repeats` times: a
round's figure is the median of its repeats, so that a small model's few milliseconds are not one
call's luck), in an order rotating from round to round. Before each timed call the older folders
are removed and `os.sync` flushes dirty pages (neither timed), and every save writes a new folder
(see `benchmarks.workers.folders`).
Emits {"bytes": model bytes, "save": {contender: [s per round]}, "load": {...}}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.jobs import emit, round_order
from benchmarks.workers.folders import Folders

WIDTH = 1024  # 4 MiB of float32 weights per layer


def _model_and_optimizer(megabytes: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers = max(1, round(megabytes * 2**20 / (WIDTH * WIDTH * 4)))
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, WIDTH)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def _raw(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folders: Folders) -> dict[str, Callable]:
    def save() -> None:
        folder = folders.new("raw")
        folder.mkdir()
        torch.save(model.state_dict(), folder / "model.bin")
        torch.save(optimizer.state_dict(), folder / "optimizer.bin")

    def load() -> None:
        folder = folders.newest("raw")
        model.load_state_dict(torch.load(folder / "model.bin", weights_only=True))
        optimizer.load_state_dict(torch.load(folder / "optimizer.bin", weights_only=True))

    return {"save": save, "load": load}


def _library(
    name: str, accelerator: Any, model: Any, optimizer: Any, folders: Folders
) -> dict[str, Callable]:
    accelerator.prepare(model, optimizer)
    return {
        "save": lambda: accelerator.save_state(str(folders.new(name))),
        "load": lambda: accelerator.load_state(str(folders.newest(name))),
    }


def _accel(model: Any, optimizer: Any, folders: Folders) -> dict[str, Callable]:
    from accel import Accelerator

    return _library("accel", Accelerator(cpu=True), model, optimizer, folders)


def _accelerate(model: Any, optimizer: Any, folders: Folders) -> dict[str, Callable]:
    from accelerate import Accelerator

    return _library("accelerate", Accelerator(cpu=True), model, optimizer, folders)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contenders", required=True)
    parser.add_argument("--megabytes", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1, help="save/load pairs per contender per round")
    parser.add_argument("--dir", type=Path, required=True, help="an empty folder to write into")
    args = parser.parse_args()
    torch.set_num_threads(1)
    folders = Folders(args.dir)
    model, optimizer = _model_and_optimizer(args.megabytes)
    builders = {"raw": _raw, "accel": _accel, "accelerate": _accelerate}
    contenders = args.contenders.split(",")
    calls = {name: builders[name](model, optimizer, folders) for name in contenders}
    results: dict[str, Any] = {
        "bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "save": {name: [] for name in contenders},
        "load": {name: [] for name in contenders},
    }
    for name in contenders:  # warm-up: first use of each code path
        calls[name]["save"](), calls[name]["load"]()
    for round_index in range(args.rounds):
        for name in round_order(contenders, round_index):
            seconds: dict[str, list[float]] = {"save": [], "load": []}
            for _ in range(args.repeats):
                for operation in ("save", "load"):
                    folders.keep_newest()
                    os.sync()
                    started = time.perf_counter()
                    calls[name][operation]()
                    seconds[operation].append(time.perf_counter() - started)
            for operation, taken in seconds.items():
                results[operation][name].append(statistics.median(taken))
    emit(results)


if __name__ == "__main__":
    main()
