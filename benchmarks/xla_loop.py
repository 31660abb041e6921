"""The basic training loop on XLA's CPU device through accel vs the same loop written by hand with
torch_xla: compiled graphs and steps/s.

Both loops train the same MLP (3 Linear layers of width 256, batch 64, fixed shapes, SGD) from the
same start. The hand loop is PyTorch/XLA's own recipe: the model moved before the optimizer is
built, `MpDeviceLoader`, `xm.optimizer_step`, the step's graph run at the loader's next batch.

- Graphs: each loop runs in a fresh process (XLA caches compiled graphs per process, so the second
  loop of one process would reuse the first's), and prints how many graphs XLA compiled
  (`CompileTime`) and how many it ran per step once warm (`ExecuteTime`). They must be equal.
- Speed: in this process, after a warm-up of both, blocks of each loop alternate so that drift in
  the machine's speed hits both alike; each block ends when the device is done. Prints the ratio
  of median steps/s, accel / hand (target: >= 0.95).

    PJRT_DEVICE=CPU python benchmarks/xla_loop.py [--rounds 9] [--steps 400]

Needs torch_xla (the `benchmark_xla` nox session installs torch and torch_xla 2.9.0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

# Before torch_xla is imported: its runtime reads them once.
os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ["CPU_NUM_DEVICES"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.pop("ACCEL_DEBUG_MODE", None)  # debug mode adds cross-replica checks to collectives

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

WIDTH = 256
BATCH = 64
CLASSES = 10
SEED = 0


def _model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, CLASSES),
    )  # fmt: skip


def _loader(steps: int) -> DataLoader:
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(steps * BATCH, WIDTH, generator=generator)
    labels = torch.randint(0, CLASSES, (steps * BATCH,), generator=generator)
    return DataLoader(TensorDataset(inputs, labels), batch_size=BATCH, drop_last=True)


class HandLoop:
    """The loop as PyTorch/XLA's guides write it."""

    def __init__(self, steps: int) -> None:
        import torch_xla
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        self.device = torch_xla.device()
        self.model = _model().to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loader = MpDeviceLoader(_loader(steps), self.device)

    def run(self) -> None:
        import torch_xla.core.xla_model as xm

        for inputs, labels in self.loader:
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(inputs), labels)
            loss.backward()
            xm.optimizer_step(self.optimizer)


class AccelLoop:
    """The same loop through accel's Accelerator (XLA chosen from PJRT_DEVICE)."""

    def __init__(self, steps: int) -> None:
        from accel import Accelerator

        self.accelerator = Accelerator()
        assert self.accelerator.distributed_type == "XLA", self.accelerator.distributed_type
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self.model, self.optimizer, self.loader = self.accelerator.prepare(model, optimizer, _loader(steps))

    def run(self) -> None:
        for inputs, labels in self.loader:
            loss = torch.nn.functional.cross_entropy(self.model(inputs), labels)
            self.accelerator.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()


LOOPS = {"hand": HandLoop, "accel": AccelLoop}


def _metric_count(name: str) -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    return int(data[0]) if data else 0


def _finish() -> None:
    """Wait until the device has run everything queued (the block's time includes it)."""
    import torch_xla

    torch_xla.sync(wait=True)


def count_graphs(mode: str, steps: int) -> dict[str, Any]:
    """Return the graphs XLA compiled for `steps` steps of the `mode` loop in this (fresh) process, and
    the graphs it ran per step once warm."""
    loop = LOOPS[mode](steps)
    loop.run()  # warm: every graph of the loop compiled
    _finish()
    compiled = _metric_count("CompileTime")
    executed = _metric_count("ExecuteTime")
    loop.run()
    _finish()
    return {
        "mode": mode,
        "compiled": compiled,
        "compiled_after_warm_up": _metric_count("CompileTime") - compiled,
        "executed_per_step": (_metric_count("ExecuteTime") - executed) / steps,
    }


def _count_in_fresh_process(mode: str, steps: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--count", mode, "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"benchmark: counting the {mode} loop's graphs failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def _timed(loop: Any, steps: int) -> float:
    start = time.perf_counter()
    loop.run()
    _finish()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--count", choices=sorted(LOOPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        print(json.dumps(count_graphs(args.count, args.steps)))
        return

    graphs = {mode: _count_in_fresh_process(mode, 20) for mode in ("hand", "accel")}
    for mode, counted in graphs.items():
        print(
            f"{mode}: {counted['compiled']} graphs compiled, {counted['compiled_after_warm_up']} more after "
            f"the warm-up, {counted['executed_per_step']:.2f} graphs run per step",
            flush=True,
        )
    same_graphs = all(
        graphs["hand"][key] == graphs["accel"][key]
        for key in ("compiled", "compiled_after_warm_up", "executed_per_step")
    )

    loops = {mode: LOOPS[mode](args.steps) for mode in ("hand", "accel")}
    for loop in loops.values():
        loop.run()  # warm-up: compile (or reuse) every graph, start the loader threads once
        _finish()
    rates: dict[str, list[float]] = {"hand": [], "accel": []}
    for round_index in range(args.rounds):
        order = ("hand", "accel") if round_index % 2 == 0 else ("accel", "hand")
        for mode in order:
            rates[mode].append(_timed(loops[mode], args.steps))
        print(
            f"round {round_index + 1}: hand {rates['hand'][-1]:.1f} steps/s, "
            f"accel {rates['accel'][-1]:.1f} steps/s",
            flush=True,
        )
    hand, accel = statistics.median(rates["hand"]), statistics.median(rates["accel"])
    ratio = accel / hand
    print(
        f"median: hand {hand:.1f} steps/s, accel {accel:.1f} steps/s; ratio accel/hand {ratio:.3f} "
        f"(target >= 0.95); graphs compiled: hand {graphs['hand']['compiled']}, "
        f"accel {graphs['accel']['compiled']} ({'equal' if same_graphs else 'NOT equal'})"
    )
    if not same_graphs:
        sys.exit("benchmark: accel's loop compiles or runs other graphs than the hand-written one")


if __name__ == "__main__":
    main()
