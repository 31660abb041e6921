"""Training steps/s under DeepSpeed ZeRO-2: accel vs a hand-driven DeepSpeed engine, in the same run.

Both run the same MLP (4 Linear layers of width 512, batch 64, one thread per process), data and
client optimizer (torch AdamW) on 2 CPU processes, each job started by
`accel launch --cpu --num_processes 2`, so that only the training loop differs:

- raw: `deepspeed.init_distributed` (gloo) and `deepspeed.initialize` with a ZeRO-2 config,
  then `engine(x)`, `engine.backward(loss)`, `engine.step()`; it imports nothing from accel;
- accel: `Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))`, `prepare(model,
  optimizer, loader)`, then `accelerator.backward(loss)`, `optimizer.step()`, `optimizer.zero_grad()`.

Starting a DeepSpeed job takes longer than many steps, and on a small machine other work comes
and goes in seconds, so one job per measurement would compare different moments. Both jobs are
started once and warmed up; then, round after round, this script lets one job run a block of
steps while the other waits idle on a socket, the order flipping each round. Prints the median
steps/s of each and the median of the per-round ratios (target: >= 0.99).

    python benchmarks/deepspeed_zero2.py [--rounds 80] [--steps 10] [--warmup 30]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

WIDTH, BATCH, LAYERS = 512, 64, 4
MODES = ("raw", "accel")
# Distinct batches per process: the loader is walked again (a new epoch) while the job runs.
BATCHES_PER_EPOCH = 32
# What accel builds from DeepSpeedPlugin(zero_stage=2) and a loader of per-process batch BATCH.
DEEPSPEED_CONFIG = {
    "train_micro_batch_size_per_gpu": BATCH,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 2},
    "gradient_clipping": 0.0,  # DeepSpeed would clip to 1.0 without the key; accel writes 0.0
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 2**31 - 1,
}
START_TIMEOUT_S = 300
REPORT_EVERY = 20  # rounds per progress line

Step = Callable[[Any], None]


def make_model() -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(WIDTH, WIDTH))
    return torch.nn.Sequential(*layers)


def make_dataset(world: int) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    rows = BATCHES_PER_EPOCH * BATCH * world
    return TensorDataset(
        torch.randn(rows, WIDTH, generator=generator), torch.randn(rows, WIDTH, generator=generator)
    )


def batches(loader: Any, set_epoch: Callable[[int], None]) -> Iterator[Any]:
    """Yield batches from `loader` forever, one epoch after another."""
    epoch = 0
    while True:
        set_epoch(epoch)
        yield from loader
        epoch += 1


def build_raw() -> tuple[Step, Iterator[Any], Callable[[], None], int]:
    """Return (step, batches, barrier, rank) of the hand-driven engine."""
    import deepspeed.comm.torch  # noqa: F401 - loaded to patch it before init_distributed runs
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    # DeepSpeed compiles a shared-memory all-reduce op for CPU that training never uses.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=DEEPSPEED_CONFIG)
    dataset = make_dataset(dist.get_world_size())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)

    def step(batch: Any) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()

    return step, batches(loader, sampler.set_epoch), dist.barrier, dist.get_rank()


def build_accel() -> tuple[Step, Iterator[Any], Callable[[], None], int]:
    """Return (step, batches, barrier, rank) of the same loop through accel."""
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator, DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(make_dataset(accelerator.num_processes), batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def step(batch: Any) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    data = batches(loader, loader.set_epoch)
    return step, data, accelerator.wait_for_everyone, accelerator.process_index


def worker(mode: str, address: str) -> None:
    """Run on every rank under `accel launch`: run each block of steps the parent asks for and
    answer its steps/s, until the parent says stop."""
    import torch

    torch.set_num_threads(1)
    step, data, barrier, rank = (build_raw if mode == "raw" else build_accel)()
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as connection, connection.makefile("rw") as channel:
        channel.write(json.dumps({"mode": mode, "rank": rank}) + "\n")
        channel.flush()
        for line in channel:
            steps = json.loads(line)
            if steps is None:
                break
            barrier()
            started = time.perf_counter()
            for _ in range(steps):
                step(next(data))
            barrier()
            channel.write(json.dumps(steps / (time.perf_counter() - started)) + "\n")
            channel.flush()


class Job:
    """One `accel launch` of this script's worker, and a channel to each of its ranks."""

    def __init__(self, mode: str, address: str, logs: str) -> None:
        self.mode = mode
        self.channels: dict[int, Any] = {}
        self.stdout = open(os.path.join(logs, f"{mode}.out"), "w+")  # noqa: SIM115 - kept for the job's life
        self.stderr = open(os.path.join(logs, f"{mode}.err"), "w+")  # noqa: SIM115
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
        env.pop("ACCEL_DEBUG_MODE", None)
        command = [
            sys.executable, "-m", "accel_launch.cli", "launch", "--cpu", "--num_processes", "2",
            __file__, "--worker", mode, "--connect", address,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self.stdout, stderr=self.stderr, env=env)

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            self.stderr.seek(0)
            sys.exit(
                f"benchmark: the {self.mode} job ended early (exit {code}):\n{self.stderr.read()[-2000:]}"
            )

    def run_block(self, steps: int) -> float:
        """Return rank 0's steps/s over `steps` steps, run by every rank."""
        for channel in self.channels.values():
            channel.write(json.dumps(steps) + "\n")
            channel.flush()
        rates = {}
        for rank, channel in self.channels.items():
            line = channel.readline()
            if not line:
                self.check_alive()
                sys.exit(f"benchmark: rank {rank} of the {self.mode} job closed its connection")
            rates[rank] = json.loads(line)
        return rates[0]

    def stop(self) -> None:
        for channel in self.channels.values():
            channel.write("null\n")
            channel.flush()
        if self.process.wait(timeout=60) != 0:
            self.check_alive()

    def close(self) -> None:
        """End the job if it still runs (this script failed), and close its logs."""
        if self.process.poll() is None:
            self.process.terminate()  # accel launch stops its workers on SIGTERM
            self.process.wait(timeout=60)
        for stream in (*self.channels.values(), self.stdout, self.stderr):
            stream.close()


def connect(server: socket.socket, jobs: dict[str, Job], processes: int) -> None:
    """Accept each rank's connection, watching that no job died before it connected."""
    server.settimeout(1.0)
    deadline = time.monotonic() + START_TIMEOUT_S
    while sum(len(job.channels) for job in jobs.values()) < processes * len(jobs):
        if time.monotonic() > deadline:
            sys.exit(f"benchmark: the jobs did not all start within {START_TIMEOUT_S} s")
        try:
            connection, _ = server.accept()
        except TimeoutError:
            for job in jobs.values():
                job.check_alive()
            continue
        connection.settimeout(None)
        channel = connection.makefile("rw")
        hello = json.loads(channel.readline())
        jobs[hello["mode"]].channels[hello["rank"]] = channel


def median_ratio(accel: list[float], raw: list[float]) -> float:
    # Ratios within a round: its two blocks ran back to back, so drift between rounds cancels.
    return statistics.median(a / r for a, r in zip(accel, raw, strict=True))


def measure(jobs: dict[str, Job], server: socket.socket, args: argparse.Namespace) -> dict[str, list[float]]:
    """Return each mode's steps/s per round, its blocks alternating with the other mode's."""
    connect(server, jobs, processes=2)
    for job in jobs.values():
        job.run_block(args.warmup)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_index in range(args.rounds):
        # raw first in even rounds, accel first in odd ones: whoever runs second is not favoured.
        for mode in MODES if round_index % 2 == 0 else MODES[::-1]:
            rates[mode].append(jobs[mode].run_block(args.steps))
        if (round_index + 1) % REPORT_EVERY == 0 or round_index + 1 == args.rounds:
            first = round_index // REPORT_EVERY * REPORT_EVERY
            raw, accel = rates["raw"][first:], rates["accel"][first:]
            print(
                f"rounds {first + 1}-{round_index + 1}: raw DeepSpeed {statistics.median(raw):.2f} steps/s, "
                f"accel {statistics.median(accel):.2f} steps/s, ratio {median_ratio(accel, raw):.3f}",
                flush=True,
            )
    for job in jobs.values():
        job.stop()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=80)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps of each job first")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--connect", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.connect)
        return
    with socket.create_server(("127.0.0.1", 0)) as server, tempfile.TemporaryDirectory() as logs:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        jobs: dict[str, Job] = {}
        try:
            for mode in MODES:
                jobs[mode] = Job(mode, address, logs)
            rates = measure(jobs, server, args)
        finally:
            for job in jobs.values():
                job.close()
    ratios = sorted(a / r for a, r in zip(rates["accel"], rates["raw"], strict=True))
    quarter = len(ratios) // 4
    blocks = f"median of {args.rounds} blocks of {args.steps} steps"
    print(f"raw DeepSpeed engine (ZeRO-2): {statistics.median(rates['raw']):.2f} steps/s ({blocks})")
    print(f"accel (DeepSpeedPlugin ZeRO-2): {statistics.median(rates['accel']):.2f} steps/s ({blocks})")
    print(
        f"ratio accel/raw: {statistics.median(ratios):.3f} (median of per-round ratios, middle half "
        f"{ratios[quarter]:.3f}-{ratios[-1 - quarter]:.3f}; target >= 0.99)"
    )


if __name__ == "__main__":
    main()
