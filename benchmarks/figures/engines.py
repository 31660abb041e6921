"""Training throughput on the sharding engines, 2 CPU processes of 1 thread each: DeepSpeed ZeRO-2
and FSDP2, accel (`accel launch`) vs the same engine driven by hand under torchrun (raw), on an MLP
of 4 x Linear 512, batch 64, AdamW (target: accel >= 0.99x raw). Accelerate 1.15 runs neither on
CPU processes. ZeRO-2 runs only where deepspeed imports; elsewhere it is listed as skipped, with why.

Blocks of steps alternate between the contenders' jobs round by round, after a warm-up of each; the
rounds are spread over `blockjobs.STARTS` starts of the jobs (a DeepSpeed job takes longer to start
than many steps, so a job is not started for each block). After each start's rounds, each job runs
its share of WORK_BLOCKS blocks under cProfile: what accel adds to a block (`benchmarks.added_work`;
target <= 1% of the hand-written block), which decides what the clock on a loaded machine cannot.
"""

from __future__ import annotations

from benchmarks import blockjobs, launchers, probe
from benchmarks.added_work import block_work, profiling
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

PROCESSES = 2
TARGET = f"{ACCEL}/{RAW}>=0.99"
ENGINES = {"deepspeed": "DeepSpeed ZeRO-2", "fsdp": "FSDP2"}
# What each engine's jobs need in their environment, and the module it needs (None: plain torch).
ENGINE_ENV = {"deepspeed": {"DS_ACCELERATOR": "cpu"}, "fsdp": {}}
ENGINE_MODULE = {"deepspeed": "deepspeed", "fsdp": None}
STEPS, QUICK_STEPS = 20, 2
WARMUP_BLOCKS = 2
WORK_BLOCKS, QUICK_WORK_BLOCKS = 9, 1  # profiled blocks of each job


def measure(options: RunOptions) -> list[Measurement]:
    """Return one Measurement per engine: samples/s of accel and of the engine by hand."""
    steps = QUICK_STEPS if options.quick else STEPS
    results = []
    for engine, engine_label in ENGINES.items():
        figure = f"train MLP 4x512 {engine_label}"
        module = ENGINE_MODULE[engine]
        missing = probe.missing_module(module, **ENGINE_ENV[engine]) if module else None
        if missing:
            results.append(Measurement(figure, "training", "samples/s", True, target=TARGET, skipped=missing))
            continue
        specs = {}
        for contender in (RAW, ACCEL):
            command, env = launchers.launcher(contender, PROCESSES)
            command += [launchers.worker("engine_loop.py"), "--engine", engine, "--contender", contender,
                        "--steps", str(steps)]  # fmt: skip
            specs[contender] = blockjobs.JobSpec(command, {**env, **ENGINE_ENV[engine]}, PROCESSES)
        work, profile = profiling([engine], QUICK_WORK_BLOCKS if options.quick else WORK_BLOCKS)
        warmup = 0 if options.quick else WARMUP_BLOCKS
        answers = blockjobs.interleaved_in_starts(
            specs, [engine], options.rounds, warmup=warmup, each_start=profile
        )[engine]
        note = (
            f"2 CPU processes x 1 thread, batch 64, AdamW; raw: the {engine_label} engine driven "
            f"by hand under torchrun; accel: `accel launch`"
        )
        results.append(
            Measurement(
                figure=figure,
                group="training",
                unit="samples/s",
                higher_is_better=True,
                samples={c: [a["rate"] for a in answers[c]] for c in specs},
                target=TARGET,
                note=f"{note}; one sample per round is {steps} steps",
            )
        )
        if work:
            added = f"accel's own work, MLP 4x512 {engine_label}"
            results.append(
                block_work(added, "engines_work", work[engine], answers[RAW], f"block of {steps} steps", note)
            )
    return results
