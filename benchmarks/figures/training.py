"""Training throughput, 2 CPU processes of 1 thread each: a hand-written DDP loop under torchrun (raw),
the same loop through accel (`accel launch`) and through Accelerate (torchrun,
ACCELERATE_USE_CPU=true); an MLP (3 x Linear 512) and a transformer encoder (4 layers, d=256, seq
128) in fp32, bf16, and fp32 with gradient accumulation 4 (target: accel >= 0.99x raw). The sharding
engines' loops are the `engines` figure, XLA's the `xla` figure, a GPU's precisions the `precision`
figure.

Each contender's job holds one setting; blocks (an epoch of a model's loader) alternate between the
jobs round by round, the rounds spread over `blockjobs.STARTS` starts of the jobs. After each
start's rounds, raw's and accel's jobs run their share of WORK_BLOCKS epochs under cProfile
(`benchmarks.added_work`): what accel adds to an epoch (its own code, and the calls the hand-written
epoch does not make) in % of the hand-written epoch (target <= 1%), which decides what the clock on
a loaded machine cannot.
"""

from __future__ import annotations

from benchmarks import blockjobs, launchers
from benchmarks.added_work import block_work, profiling
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

PROCESSES = 2
TARGET = f"{ACCEL}/{RAW}>=0.99"
# (label, --precision, --accumulation)
SETTINGS = (("fp32", "no", 1), ("bf16", "bf16", 1), ("fp32 accum 4", "no", 4))
# A quick run starts one job per contender (each costs seconds): the setting that takes every path.
QUICK_SETTINGS = (("bf16 accum 4", "bf16", 4),)
MODELS = {"mlp": "MLP 3x512", "transformer": "encoder 4x256"}
# Batches per process in one epoch (one block) of each model, full and quick runs.
BATCHES = {"mlp": 64, "transformer": 8}
QUICK_BATCHES = 4
WORK_BLOCKS, QUICK_WORK_BLOCKS = 9, 1  # profiled epochs of each model in raw's and accel's jobs
NOTE = (
    "2 CPU processes x 1 thread; raw: DDP by hand under torchrun (autocast for bf16, no_sync between "
    "accumulated steps); accel: `accel launch`; Accelerate: torchrun with ACCELERATE_USE_CPU=true"
)


def measure(options: RunOptions) -> list[Measurement]:
    """One job per contender and setting (Accelerate keeps one precision per process), holding both models."""
    results = []
    for label, precision, accumulation in QUICK_SETTINGS if options.quick else SETTINGS:
        specs = {c: _train_job(c, precision, accumulation, options.quick) for c in options.contenders}
        work, profile = profiling(list(MODELS), QUICK_WORK_BLOCKS if options.quick else WORK_BLOCKS)
        answers = blockjobs.interleaved_in_starts(
            specs, list(MODELS), options.rounds, warmup=0 if options.quick else 1, each_start=profile
        )
        for model, model_label in MODELS.items():
            results.append(
                Measurement(
                    figure=f"train {model_label} {label}",
                    group="training",
                    unit="samples/s",
                    higher_is_better=True,
                    samples={c: [a["rate"] for a in answers[model][c]] for c in specs},
                    target=TARGET,
                    note=f"{NOTE}; one sample per round is an epoch of the model's loader",
                )
            )
            if work:
                figure = f"accel's own work, {model_label} {label}"
                results.append(
                    block_work(figure, "training_work", work[model], answers[model][RAW], "epoch", NOTE)
                )
    return results


def _train_job(contender: str, precision: str, accumulation: int, quick: bool) -> blockjobs.JobSpec:
    command, env = launchers.launcher(contender, PROCESSES)
    command += [launchers.worker("train_loop.py"), "--contender", contender, "--precision", precision,
                "--accumulation", str(accumulation), "--models", ",".join(MODELS)]  # fmt: skip
    batches = {model: QUICK_BATCHES if quick else BATCHES[model] for model in MODELS}
    command += ["--batches", ",".join(f"{model}={count}" for model, count in batches.items())]
    return blockjobs.JobSpec(command + (["--quick"] if quick else []), env, PROCESSES)
