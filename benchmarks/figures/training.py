"""Training throughput, 2 CPU processes of 1 thread each: a hand-written DDP loop under torchrun (raw),
the same loop through accel (`accel launch`) and through Accelerate (torchrun, ACCELERATE_USE_CPU=true);
an MLP (3 x Linear 512) and a transformer encoder (4 layers, d=256, seq 128) in fp32, bf16, and fp32
with gradient accumulation 4. Then DeepSpeed ZeRO-2 (where deepspeed imports) and FSDP2, accel vs
the engine driven by hand; and on a CUDA device, bf16/fp16 speed-up over fp32 and peak memory.

Each contender's job starts once per setting; blocks (an epoch of a model's loader) alternate
between the jobs round by round.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from benchmarks import blockjobs, launchers
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
ENGINES = {"deepspeed": "DeepSpeed ZeRO-2", "fsdp": "FSDP2"}
GPU_PRECISIONS = (("fp32", "no"), ("bf16", "bf16"), ("fp16", "fp16"))


def measure(options: RunOptions) -> list[Measurement]:
    """Return the CPU training figures, then the engines', then the GPU's (or why they were skipped)."""
    return [*cpu_training(options), *engines(options), *gpu_precision(options)]


def _train_job(contender: str, precision: str, accumulation: int, quick: bool) -> blockjobs.JobSpec:
    command, env = launchers.launcher(contender, PROCESSES)
    command += [launchers.worker("train_loop.py"), "--contender", contender, "--precision", precision,
                "--accumulation", str(accumulation), "--models", ",".join(MODELS)]  # fmt: skip
    batches = {model: QUICK_BATCHES if quick else BATCHES[model] for model in MODELS}
    command += ["--batches", ",".join(f"{model}={count}" for model, count in batches.items())]
    return blockjobs.JobSpec(command + (["--quick"] if quick else []), env, PROCESSES)


def cpu_training(options: RunOptions) -> list[Measurement]:
    """One job per contender and setting (Accelerate keeps one precision per process), holding both models."""
    results = []
    for label, precision, accumulation in QUICK_SETTINGS if options.quick else SETTINGS:
        specs = {c: _train_job(c, precision, accumulation, options.quick) for c in options.contenders}
        with blockjobs.started(specs) as jobs:
            answers = blockjobs.interleaved(
                jobs, list(MODELS), options.rounds, warmup=0 if options.quick else 1
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
                    note="2 CPU processes x 1 thread; raw: DDP by hand under torchrun (autocast for bf16, "
                    "no_sync between accumulated steps); accel: `accel launch`; Accelerate: torchrun with "
                    "ACCELERATE_USE_CPU=true; one sample per round is an epoch of the model's loader",
                )
            )
    return results


def imports(module: str, **env: str) -> str | None:
    """Return None when `module` imports in a child process, else why not (its last error line)."""
    if importlib.util.find_spec(module) is None:
        return f"`import {module}` fails here ({module} is not installed)"
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                           env=launchers.child_env(**env), timeout=300)  # fmt: skip
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return f"`import {module}` fails here ({lines[-1] if lines else 'no output'})"


def engines(options: RunOptions) -> list[Measurement]:
    """accel vs the engine driven by hand, each job started once, blocks of steps interleaved."""
    results = []
    steps = 2 if options.quick else 20
    for engine, engine_label in ENGINES.items():
        figure = f"train MLP 4x512 {engine_label}"
        extra_env = {"DS_ACCELERATOR": "cpu"} if engine == "deepspeed" else {}
        missing = imports("deepspeed", **extra_env) if engine == "deepspeed" else None
        if missing:
            results.append(Measurement(figure, "training", "samples/s", True, target=TARGET, skipped=missing))
            continue
        specs = {}
        for contender in (RAW, ACCEL):
            command, env = launchers.launcher(contender, PROCESSES)
            command += [launchers.worker("engine_loop.py"), "--engine", engine, "--contender", contender,
                        "--steps", str(steps)]  # fmt: skip
            specs[contender] = blockjobs.JobSpec(command, {**env, **extra_env}, PROCESSES)
        with blockjobs.started(specs) as jobs:
            answers = blockjobs.interleaved(jobs, [engine], options.rounds, warmup=0 if options.quick else 2)[
                engine
            ]
        results.append(
            Measurement(
                figure=figure,
                group="training",
                unit="samples/s",
                higher_is_better=True,
                samples={c: [a["rate"] for a in answers[c]] for c in specs},
                target=TARGET,
                note=f"2 CPU processes x 1 thread, batch 64, AdamW; raw: the {engine_label} engine driven "
                f"by hand under torchrun; accel: `accel launch`; one sample per round is {steps} steps",
            )
        )
    return results


def cuda_missing() -> str | None:
    """Return None when a CUDA device is usable, else why the GPU figure is skipped."""
    if not any(Path("/dev").glob("nvidia[0-9]*")) and not Path("/dev/kfd").exists():
        return "no CUDA device (no /dev/nvidia* or /dev/kfd on this machine)"
    check = "import torch; raise SystemExit(not torch.cuda.is_available())"
    probe = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                           env=launchers.child_env(), timeout=300)  # fmt: skip
    return None if probe.returncode == 0 else "no CUDA device (torch.cuda.is_available() is False)"


def gpu_precision(options: RunOptions) -> list[Measurement]:
    """Per contender and precision: steps/s, speed-up over fp32 (within each round) and peak memory."""
    missing = cuda_missing()
    if missing:
        return [Measurement("gpu bf16/fp16 speed-up over fp32", "gpu", "x", True, skipped=missing)]
    steps = 3 if options.quick else 20
    specs = {}
    for contender in options.contenders:
        for _, precision in GPU_PRECISIONS:
            command = [sys.executable, launchers.worker("gpu_precision.py"), "--contender", contender,
                       "--precision", precision, "--steps", str(steps)]  # fmt: skip
            if options.quick:
                command += ["--width", "1024", "--tokens", "2048"]
            specs[f"{contender}:{precision}"] = blockjobs.JobSpec(command, launchers.child_env(), 1)
    with blockjobs.started(specs) as jobs:
        answers = blockjobs.interleaved(jobs, ["step"], options.rounds, warmup=0 if options.quick else 1)[
            "step"
        ]
    results = []
    for label, precision in GPU_PRECISIONS:
        rates = {c: [a["rate"] for a in answers[f"{c}:{precision}"]] for c in options.contenders}
        if precision != "no":
            fp32 = {c: [a["rate"] for a in answers[f"{c}:no"]] for c in options.contenders}
            results.append(Measurement(
                f"gpu {label} speed-up over fp32", "gpu", "x", True,
                samples={c: [r / base for r, base in zip(rates[c], fp32[c], strict=True)] for c in rates},
                note="one CUDA device, a transformer block (width 4096, 8192 tokens per step), AdamW; raw: "
                "autocast and GradScaler by hand; accel and Accelerate: mixed_precision=",
            ))  # fmt: skip
        results.append(Measurement(f"gpu {label} steps/s", "gpu", "steps/s", True, samples=rates))
        peaks = {c: [a["max_memory_mb"] for a in answers[f"{c}:{precision}"]] for c in options.contenders}
        results.append(
            Measurement(f"gpu {label} max memory allocated", "gpu memory", "MB", False, samples=peaks)
        )
    return results
