"""What a user waits for before training: the import over `import torch`, the CLI's `--help`, and a
launch of 2 CPU processes that only start the world (raw: torchrun; accel: `accel launch --cpu`;
Accelerate: torchrun with ACCELERATE_USE_CPU=true, its working multi-CPU path).

Every sample is a fresh process (nothing cached in memory but the OS's page cache), contenders
interleaved within each round.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks import launchers
from benchmarks.measurement import ACCEL, ACCELERATE, RAW, Measurement, RunOptions

TIMEOUT_S = 300
# `--help` answers in tens of ms: each sample is the median of up to this many runs, fewer for a
# command that imports torch (seconds) once they add up to HELP_BUDGET_S.
HELP_REPEATS = 5
HELP_BUDGET_S = 1.0
IMPORT_TIMER = (
    "import time\n{before}\nstarted = time.perf_counter()\n{statement}\nprint(time.perf_counter() - started)"
)
IMPORTS = {
    RAW: ("", "import torch"),
    ACCEL: ("import torch", "from accel import Accelerator"),
    ACCELERATE: ("import torch", "from accelerate import Accelerator"),
}


class CommandFailed(RuntimeError):
    """A measured command exited non-zero; the message names it and holds its stderr's tail."""


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise CommandFailed(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return done


def wall_time(command: list[str], env: dict[str, str] | None = None) -> float:
    """Return the seconds `command` took from start to exit."""
    started = time.perf_counter()
    _run(command, env if env is not None else launchers.child_env())
    return time.perf_counter() - started


def import_time(contender: str) -> float:
    """Return the seconds one import took in a fresh interpreter (accel and Accelerate: after torch)."""
    before, statement = IMPORTS[contender]
    code = IMPORT_TIMER.format(before=before, statement=statement)
    return float(_run([sys.executable, "-c", code], launchers.child_env()).stdout.strip().splitlines()[-1])


def rounds_of(
    options: RunOptions, contenders: tuple[str, ...], sample: Callable[[str], float]
) -> dict[str, list[float]]:
    """Return contender -> one `sample(contender)` per round, the order rotated round by round."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for round_index in range(options.rounds):
        shift = round_index % len(contenders)
        for name in contenders[shift:] + contenders[:shift]:
            samples[name].append(sample(name))
    return samples


def cli_commands() -> dict[str, dict[str, list[str]]]:
    """Return figure -> contender -> command of the CLI figures."""
    accel = launchers.console("accel", "accel_launch.commands.cli")
    accelerate = launchers.console("accelerate", "accelerate.commands.accelerate_cli")
    torchrun = launchers.console("torchrun", "torch.distributed.run")
    return {
        "`accel --help`": {RAW: [sys.executable, "-c", "pass"], ACCEL: [*accel, "--help"],
                           ACCELERATE: [*accelerate, "--help"]},
        "`accel launch --help`": {RAW: [*torchrun, "--help"], ACCEL: [*accel, "launch", "--help"],
                                  ACCELERATE: [*accelerate, "launch", "--help"]},
    }  # fmt: skip


def launch_command(contender: str, script_contender: str) -> tuple[list[str], dict[str, str]]:
    command, env = launchers.launcher(contender, 2)
    return [*command, launchers.worker("world_start.py"), script_contender], env


def measure(options: RunOptions) -> list[Measurement]:
    """Return the import, CLI and launch figures, contenders interleaved within each round."""
    contenders = options.contenders
    repeats = 1 if options.quick else HELP_REPEATS
    results = [
        Measurement(
            "import cost over `import torch`", "startup", "s", False,
            samples=rounds_of(options, contenders, import_time),
            target=f"{ACCEL}/{ACCELERATE}<=0.5",
            note="`from accel import Accelerator` (Accelerate: `from accelerate import Accelerator`) timed "
            "in a fresh interpreter after `import torch`; raw: `import torch` itself",
        )
    ]  # fmt: skip
    for figure, commands in cli_commands().items():
        available = tuple(name for name in contenders if name in commands)

        def help_time(name: str, commands: dict[str, list[str]] = commands) -> float:
            times = [wall_time(commands[name])]
            while len(times) < repeats and sum(times) < HELP_BUDGET_S:
                times.append(wall_time(commands[name]))
            return statistics.median(times)

        raw_label = (
            "`python -c pass` (the interpreter's start)" if "launch" not in figure else "`torchrun --help`"
        )
        results.append(Measurement(
            figure, "startup", "s", False, samples=rounds_of(options, available, help_time),
            target=f"{ACCEL}<0.1" if "launch" not in figure else None,
            note=f"wall time from start to exit, median of up to {repeats} runs per round; raw: {raw_label}",
        ))  # fmt: skip

    def world_start(name: str) -> float:
        return wall_time(*launch_command(name, name))

    results.append(Measurement(
        "launch 2 CPU processes that start the world", "startup", "s", False,
        samples=rounds_of(options, contenders, world_start), target=f"{ACCEL}/{RAW}<=1.03",
        note="wall time of the whole job; raw: torchrun, init_process_group(gloo) and a barrier; accel: "
        "`accel launch --cpu --num_processes 2`, Accelerator() and wait_for_everyone(); Accelerate: the same "
        "under torchrun with ACCELERATE_USE_CPU=true",
    ))  # fmt: skip
    if not options.quick:

        def launcher_alone(name: str) -> float:
            return wall_time(*launch_command(name, RAW))

        results.append(Measurement(
            "launch 2 CPU processes, the launcher alone", "startup", "s", False,
            samples=rounds_of(options, (RAW, ACCEL), launcher_alone), target=f"{ACCEL}/{RAW}<=1.03",
            note="the raw script (init_process_group and a barrier) under torchrun vs `accel launch --cpu`",
        ))  # fmt: skip
    return results
