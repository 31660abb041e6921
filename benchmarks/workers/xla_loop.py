"""An XLA block job: the basic training loop on XLA's CPU device, written by hand with torch_xla
(`raw`) or through accel; one block is one epoch of the loader, timed until the device is done.
Each answer also carries XLA's graph counts, this process's own (XLA caches compiled graphs per
process, so each loop runs in a fresh one).

    python xla_loop.py --contender raw|accel [--steps N] --connect HOST:PORT --job NAME

Both loops train the same MLP (3 Linear layers of width 256, batch 64, fixed shapes, SGD) from the
same start. The hand loop is PyTorch/XLA's own recipe: the model moved before the optimizer is
built, `MpDeviceLoader`, `xm.optimizer_step`, the step's graph run at the loader's next batch.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

# Before torch_xla is imported: its runtime reads them once.
os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ["CPU_NUM_DEVICES"] = "1"

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from benchmarks.workers.serve import Task, add_arguments, serve  # noqa: E402

WIDTH, BATCH, CLASSES, SEED = 256, 64, 10, 0


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
        chosen = str(self.accelerator.distributed_type)
        if "XLA" not in chosen:
            raise SystemExit(f"xla_loop.py: accel chose {chosen}, not XLA, with PJRT_DEVICE=CPU")
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self.model, self.optimizer, self.loader = self.accelerator.prepare(model, optimizer, _loader(steps))

    def run(self) -> None:
        for inputs, labels in self.loader:
            loss = torch.nn.functional.cross_entropy(self.model(inputs), labels)
            self.accelerator.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()


LOOPS: dict[str, Any] = {"raw": HandLoop, "accel": AccelLoop}


def _metric_count(name: str) -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    return int(data[0]) if data else 0


def _finish() -> None:
    """Wait until the device has run everything queued (the block's time includes it)."""
    import torch_xla

    torch_xla.sync(wait=True)


class Graphs:
    """XLA's graph counts at each answer: compiled so far in this process, and run per step since the
    previous answer (the figure's warm-up blocks answer first, so a timed block's count is its own)."""

    def __init__(self, steps: int) -> None:
        self.steps, self.blocks, self.executed = steps, 0, 0

    def counted_block(self, loop: Any) -> float:
        loop.run()
        self.blocks += 1
        return float(self.steps)

    def answer(self) -> dict[str, float]:
        executed = _metric_count("ExecuteTime")
        per_step = (executed - self.executed) / max(1, self.blocks * self.steps)
        self.executed, self.blocks = executed, 0
        return {"graphs_compiled": float(_metric_count("CompileTime")), "graphs_per_step": per_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contender", choices=sorted(LOOPS), required=True)
    parser.add_argument("--steps", type=int, default=400, help="steps in one block (one epoch)")
    add_arguments(parser)
    args = parser.parse_args()
    loop = LOOPS[args.contender](args.steps)
    graphs = Graphs(args.steps)
    task = Task(lambda: graphs.counted_block(loop), sync=_finish, extras=graphs.answer)
    serve(args, 0, {"xla": task}, lambda: None)


if __name__ == "__main__":
    main()
