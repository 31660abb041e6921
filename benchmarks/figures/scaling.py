"""Scale curves: how launching and training cost grow with the job, raw PyTorch vs accel (and
Accelerate) on one plot each. The `startup` and `training` figures hold the targets at one size;
these curves show whether accel keeps raw's shape at the other sizes.

- "launch scale": the wall time of a job that only starts the world (`workers/world_start.py`) on
  1, 2, 4 and 8 CPU processes; raw: torchrun; accel: `accel launch --cpu`; Accelerate: torchrun with
  ACCELERATE_USE_CPU=true. Every sample is a fresh job, contenders interleaved within each round.
  No target (the `startup` figure carries the launch target at 2 processes): a launcher whose cost
  grows faster than torchrun's with the world shows here. Where the processes outnumber the cores,
  they share them: the curve is the cost of starting N processes, not a parallel speed.
- "training scale": samples/s of an MLP of 3 x Linear W (W = 128 to 2048), AdamW, batches of 64 per
  process, fp32, on 2 CPU processes of 1 thread (`workers/train_loop.py`'s "mlp<W>" models); raw: DDP
  by hand under torchrun; accel: `accel launch` and Accelerator().prepare; Accelerate: the same under
  torchrun. A library's per-step cost is fixed while compute and the gradient all-reduce grow with
  the model: the small widths show that cost, the large ones that nothing grows with the model.
  Each contender's job holds every width; blocks (an epoch of one width's loader, a second or two)
  alternate between the jobs round by round, the rounds spread over `blockjobs.STARTS` starts of the
  jobs. Target: accel >= 0.99x raw per width. After each start's rounds, raw's and accel's jobs run
  their share of WORK_BLOCKS epochs of each width under cProfile: what accel adds to an epoch
  (`benchmarks.added_work`; target <= 1% of the hand-written epoch).

The launch curve, a fresh job of up to 8 processes per sample, takes at most LAUNCH_ROUNDS rounds.
"""

from __future__ import annotations

import dataclasses

from benchmarks import blockjobs, launchers
from benchmarks.added_work import block_work, profiling
from benchmarks.figures.startup import rounds_of, wall_time
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

PROCESS_COUNTS, QUICK_PROCESS_COUNTS = (1, 2, 4, 8), (1, 2)
# Rounds of the launch curve: a round of 1+2+4+8 processes per contender takes over a minute on 2 cores.
LAUNCH_ROUNDS = 3
TRAIN_PROCESSES = 2
# Width -> batches per process in one block (an epoch): a second or two of training each.
WIDTHS = {128: 128, 512: 48, 1024: 16, 2048: 6}
QUICK_WIDTHS = {64: 4, 128: 4}
WORK_BLOCKS, QUICK_WORK_BLOCKS = 9, 1  # profiled epochs of each width in raw's and accel's jobs
TARGET = f"{ACCEL}/{RAW}>=0.99"
# A quick run (the smoke test) draws both lines of each plot, raw and accel: every launch costs seconds,
# and Accelerate's paths are those the `startup` and `training` figures' quick runs take.
QUICK_CONTENDERS = (RAW, ACCEL)


def measure(options: RunOptions) -> list[Measurement]:
    """Return the launch curve (x = process count, in s) and the training curve (x = parameters)."""
    if options.quick:
        contenders = tuple(c for c in options.contenders if c in QUICK_CONTENDERS)
        options = dataclasses.replace(options, contenders=contenders)
    return launch_curve(options) + training_curve(options)


def launch_time(contender: str, processes: int) -> float:
    """Return the seconds a job of `processes` CPU processes that only starts the world took."""
    command, env = launchers.launcher(contender, processes)
    return wall_time([*command, launchers.worker("world_start.py"), contender], env)


def launch_curve(options: RunOptions) -> list[Measurement]:
    """One Measurement per process count: the whole job's wall time."""
    capped = dataclasses.replace(options, rounds=min(options.rounds, LAUNCH_ROUNDS))
    results = []
    for processes in QUICK_PROCESS_COUNTS if options.quick else PROCESS_COUNTS:

        def sample(name: str, processes: int = processes) -> float:
            return launch_time(name, processes)

        samples = rounds_of(capped, options.contenders, sample)
        noun = "process that starts" if processes == 1 else "processes that start"
        results.append(
            Measurement(
                figure=f"launch {processes} CPU {noun} the world",
                group="launch scale",
                unit="s",
                higher_is_better=False,
                samples=samples,
                x=float(processes),
                x_label="processes",
                series="launch",
                note="wall time of the whole job; raw: torchrun, init_process_group(gloo) and a barrier; "
                "accel: `accel launch --cpu`, Accelerator() and wait_for_everyone(); Accelerate: the same "
                f"under torchrun with ACCELERATE_USE_CPU=true; {capped.rounds} rounds at most",
            )
        )
    return results


def training_curve(options: RunOptions) -> list[Measurement]:
    """One Measurement per MLP width, in samples/s, x = the model's parameter count."""
    widths = QUICK_WIDTHS if options.quick else WIDTHS
    models = {f"mlp{width}": batches for width, batches in widths.items()}
    specs = {c: _train_job(c, models, options.quick) for c in options.contenders}
    work, profile = profiling(list(models), QUICK_WORK_BLOCKS if options.quick else WORK_BLOCKS)
    answers = blockjobs.interleaved_in_starts(
        specs, list(models), options.rounds, warmup=0 if options.quick else 1, each_start=profile
    )
    results = []
    note = (
        f"{TRAIN_PROCESSES} CPU processes x 1 thread, fp32, batch 64 per process; raw: DDP by hand under "
        "torchrun; accel: `accel launch`; Accelerate: torchrun with ACCELERATE_USE_CPU=true"
    )
    for model, width in zip(models, widths, strict=True):
        per_contender = answers[model]
        results.append(
            Measurement(
                figure=f"train MLP 3x{width} AdamW, {TRAIN_PROCESSES} processes",
                group="training scale",
                unit="samples/s",
                higher_is_better=True,
                samples={c: [answer["rate"] for answer in per_contender[c]] for c in specs},
                x=per_contender[RAW][0]["parameters"],
                x_label="parameters",
                series="train",
                target=TARGET,
                note=f"{note}; one sample per round is an epoch of {widths[width]} batches",
            )
        )
        if work:
            figure = f"accel's own work, MLP 3x{width} AdamW, {TRAIN_PROCESSES} processes"
            common = {"x": per_contender[RAW][0]["parameters"], "x_label": "parameters"}
            results.append(
                block_work(
                    figure, "training scale work", work[model], per_contender[RAW], "epoch", note, **common
                )
            )
    return results


def _train_job(contender: str, models: dict[str, int], quick: bool) -> blockjobs.JobSpec:
    command, env = launchers.launcher(contender, TRAIN_PROCESSES)
    command += [launchers.worker("train_loop.py"), "--contender", contender, "--models", ",".join(models),
                "--batches", ",".join(f"{model}={count}" for model, count in models.items())]  # fmt: skip
    return blockjobs.JobSpec(command + (["--quick"] if quick else []), env, TRAIN_PROCESSES)
