"""Block jobs, the figure side (the workers' side is benchmarks/workers/serve.py): start each
contender's job, run its blocks of work in turn, round by round, and read back each block's rate.

A job's placement (which core its ranks share, its memory's layout) lasts as long as its processes:
rounds within one start of the jobs vary less than starts do (the same loop through two starts has
differed by 5-7% here while each start's rounds agreed within 3%). So the rounds are spread over
STARTS starts of the jobs, and a figure's interval holds that variation too."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

START_TIMEOUT_S = 600
BLOCK_TIMEOUT_S = 900
STARTS = 3  # fresh starts of a figure's jobs, its rounds spread over them


class JobFailed(RuntimeError):
    """A benchmark job ended early or broke its connection; the message holds the tail of its stderr."""


@dataclass
class JobSpec:
    """How to start one job: its command (without `--connect`/`--job`), env and process count."""

    command: list[str]
    env: dict[str, str]
    processes: int


class BlockJob:
    """One started job and a channel to each of its ranks."""

    def __init__(self, name: str, spec: JobSpec, address: str, logs: str) -> None:
        self.name, self.processes = name, spec.processes
        self.channels: dict[int, IO[str]] = {}
        self.stdout = open(os.path.join(logs, f"{name}.out"), "w+")  # noqa: SIM115 - kept for the job's life
        self.stderr = open(os.path.join(logs, f"{name}.err"), "w+")  # noqa: SIM115
        command = [*spec.command, "--connect", address, "--job", name]
        self.process = subprocess.Popen(
            command, stdout=self.stdout, stderr=self.stderr, env=spec.env, start_new_session=True
        )

    def fail_if_ended(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise JobFailed(f"job {self.name} ended early (exit {code}): {self.stderr_tail()}")

    def stderr_tail(self, characters: int = 1500) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()[-characters:].strip()

    def run(self, task: str, blocks: int = 1) -> dict[str, Any]:
        """Return rank 0's answer ({"rate", "seconds", ...}) to `blocks` blocks of `task` on every rank."""
        return self.run_on_every_rank(task, blocks)[0]

    def run_on_every_rank(self, task: str, blocks: int = 1) -> list[dict[str, Any]]:
        """Return every rank's answer, in rank order, to `blocks` blocks of `task` on every rank."""
        for channel in self.channels.values():
            channel.write(json.dumps({"task": task, "blocks": blocks}) + "\n")
            channel.flush()
        answers = {}
        for rank, channel in self.channels.items():
            line = channel.readline()
            if not line:
                self.fail_if_ended()
                raise JobFailed(f"rank {rank} of job {self.name} closed its connection: {self.stderr_tail()}")
            answers[rank] = json.loads(line)
        return [answers[rank] for rank in sorted(answers)]

    def stop(self) -> None:
        for channel in self.channels.values():
            channel.write("null\n")
            channel.flush()
        try:
            code = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise JobFailed(f"job {self.name} did not end within 120 s of being told to stop") from None
        if code != 0:
            raise JobFailed(f"job {self.name} ended with exit {code}: {self.stderr_tail()}")

    def close(self) -> None:
        """End the job if it still runs (the figure failed), and close its channels and logs."""
        if self.process.poll() is None:
            self.process.terminate()  # launchers stop their workers on SIGTERM
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for stream in (*self.channels.values(), self.stdout, self.stderr):
            stream.close()


def _accept_all(server: socket.socket, jobs: dict[str, BlockJob]) -> None:
    server.settimeout(1.0)
    deadline = time.monotonic() + START_TIMEOUT_S
    while any(len(job.channels) < job.processes for job in jobs.values()):
        if time.monotonic() > deadline:
            raise JobFailed(f"the jobs {', '.join(jobs)} did not all connect within {START_TIMEOUT_S} s")
        try:
            connection, _ = server.accept()
        except TimeoutError:
            for job in jobs.values():
                job.fail_if_ended()
            continue
        connection.settimeout(BLOCK_TIMEOUT_S)
        channel = connection.makefile("rw")
        connection.close()  # the file keeps the socket open
        hello = json.loads(channel.readline())
        jobs[hello["job"]].channels[hello["rank"]] = channel


@contextmanager
def started(specs: dict[str, JobSpec]) -> Iterator[dict[str, BlockJob]]:
    """Start every job of `specs` at once, wait until each rank has connected, and yield them by name;
    on leaving, tell them to stop (or end them, on an error)."""
    with socket.create_server(("127.0.0.1", 0)) as server, tempfile.TemporaryDirectory() as logs:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        jobs: dict[str, BlockJob] = {}
        try:
            for name, spec in specs.items():
                jobs[name] = BlockJob(name, spec, address, logs)
            _accept_all(server, jobs)
            yield jobs
            for job in jobs.values():
                job.stop()
        finally:
            for job in jobs.values():
                job.close()


def interleaved(
    jobs: dict[str, BlockJob], tasks: list[str], rounds: int, blocks: int = 1, warmup: int = 1
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Return task -> job -> one answer per round; each round runs every job's blocks in turn, the
    jobs' order rotated round by round so that none always runs first. `warmup` untimed blocks of
    each task run first in every job."""
    if warmup:
        for job in jobs.values():
            for task in tasks:
                job.run(task, warmup)
    answers: dict[str, dict[str, list[dict[str, Any]]]] = {
        task: {name: [] for name in jobs} for task in tasks
    }
    names = list(jobs)
    for round_index in range(rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for task in tasks:
            for name in order:
                answers[task][name].append(jobs[name].run(task, blocks))
    return answers


Answers = dict[str, dict[str, list[dict[str, Any]]]]  # task -> job -> one answer per round
# Called in each start's jobs after its rounds, with the start's index and the number of starts.
StartHook = Callable[[dict[str, BlockJob], int, int], None]


def share(total: int, index: int, count: int) -> int:
    """Return start `index`'s part of `total` spread over `count` starts (the first ones take the rest)."""
    return total // count + (1 if index < total % count else 0)


def interleaved_in_starts(
    specs: dict[str, JobSpec], tasks: list[str], rounds: int, warmup: int = 1,
    starts: int = STARTS, each_start: StartHook | None = None,
) -> Answers:  # fmt: skip
    """Return `interleaved`'s answers to `rounds` rounds spread over `starts` fresh starts of the jobs of
    `specs` (at most one start a round), each start warmed up anew; `each_start` runs in each start's
    jobs after its rounds (the profiled blocks)."""
    count = max(1, min(starts, rounds))
    answers: Answers = {task: {name: [] for name in specs} for task in tasks}
    for index in range(count):
        with started(specs) as jobs:
            part = interleaved(jobs, tasks, share(rounds, index, count), warmup=warmup)
            if each_start is not None:
                each_start(jobs, index, count)
        for task, per_job in part.items():
            for name, answers_of_start in per_job.items():
                answers[task][name].extend(answers_of_start)
    return answers
