"""The worker side of a block job: every rank connects to the figure that started it, then runs the
blocks of work it is asked for and answers how fast they ran, until it is told to stop.

A job is kept for several rounds: figures interleave short blocks of the contenders' jobs round by
round (the others waiting idle on their socket), so that drift in the machine's speed hits all
alike and no round pays for a process start (a figure's rounds are spread over a few starts of its
jobs: `blockjobs.interleaved_in_starts`). Every task "<name>" has a twin "<name>:work": one block
under cProfile, whose answer also holds what the block called (`step_work`: "functions", "step_s").
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.workers.step_work import step_work

WORK = ":work"  # "<task>:work": one block of the task under cProfile


@dataclass
class Task:
    """One kind of block a job can run: `run` does one block and returns the samples it processed."""

    run: Callable[[], float]
    # Called after the timed blocks, before the closing barrier (e.g. torch.cuda.synchronize).
    sync: Callable[[], None] = lambda: None
    # Extra numbers to answer with each block (e.g. peak device memory).
    extras: Callable[[], dict[str, float]] = field(default=lambda: {})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags every block job takes: where to connect and the job's name."""
    parser.add_argument("--connect", required=True, help="host:port of the figure that started this job")
    parser.add_argument("--job", required=True, help="this job's name, as the figure knows it")


def serve(args: argparse.Namespace, rank: int, tasks: dict[str, Task], barrier: Callable[[], None]) -> None:
    """Run the blocks the figure asks for ({"task": name, "blocks": n}) until it sends null."""
    tasks = {**tasks, **{name + WORK: _profiled(task) for name, task in tasks.items()}}
    host, port = args.connect.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as connection, connection.makefile("rw") as channel:
        channel.write(json.dumps({"job": args.job, "rank": rank}) + "\n")
        channel.flush()
        for line in channel:
            request: dict[str, Any] | None = json.loads(line)
            if request is None:
                break
            task = tasks[request["task"]]
            barrier()
            started = time.perf_counter()
            samples = sum(task.run() for _ in range(request["blocks"]))
            task.sync()
            barrier()
            seconds = time.perf_counter() - started
            channel.write(json.dumps({"rate": samples / seconds, "seconds": seconds, **task.extras()}) + "\n")
            channel.flush()


def _profiled(task: Task) -> Task:
    """Return a task that runs one block of `task` under cProfile and answers, beside the task's own
    extras, what that block called (`step_work`)."""
    called: dict[str, Any] = {}
    samples: list[float] = []

    def run() -> float:
        samples.clear()
        called.update(step_work(lambda: samples.append(task.run()), 1))
        return samples[0]

    return Task(run, task.sync, lambda: {**task.extras(), **called})
