"""The GPU check's compile step: the compile figure's 12-block encoder (`workers/compile_job.py`, the
same shape, warm-up and timed steps as on the CPU) trained on the CUDA device eager, fully compiled
and compiled by region with inductor, each run a fresh process with a fresh inductor cache (the warm
run reuses its contender's cold regional cache), so that the two speed goals of torch.compile
(regional compiles >= 3x faster than full on 12 blocks; compiled steps/s >= eager) are measured where
inductor makes GPU kernels.

The runs go in the order the goals need them (raw eager, then accel's, then raw's and Accelerate's
compiles) within the step's budget: a run that the time left cannot hold, judged by the slowest finished
run of its kind, is left out and named; one still going at the deadline (a first compile slower than
the budget) is stopped and named too. Neither fails the step: only a run that breaks, or compiles no
graph, does. A dry run compiles the figure's tiny model
with `aot_eager` on the CPU (raw eager, accel full and regional, at once).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import launchers, probe
from benchmarks.figures.compile import MODELS, QUICK_MODELS, QUICK_STEPS, REGIONAL_SPEEDUP, STEPS
from benchmarks.gpu_check.commands import Run, StepError, answer, finish, start
from benchmarks.gpu_check.record import StepResult

MODEL_NAME = "encoder 12x256"
# (contender, variant, reuses the cold regional cache) in the order they run on a GPU.
Runs = tuple[tuple[str, str, bool], ...]
RUNS: Runs = (
    ("raw", "eager", False),
    ("accel", "full", False),
    ("accel", "regional", False),
    ("accel", "regional", True),
    ("accel", "eager", False),
    ("raw", "regional", False),
    ("raw", "full", False),
    ("accelerate", "regional", False),
    ("accelerate", "full", False),
)
DRY_RUNS: Runs = (("raw", "eager", False), ("accel", "full", False), ("accel", "regional", False))
# A run's process start and CUDA set-up, added to the slowest finished run of its kind when judging
# whether the time left holds it.
START_MARGIN_S = 5.0


def arguments(run: Run, contender: str, variant: str) -> list[str]:
    shape, steps = (QUICK_MODELS["encoder 2x32"], QUICK_STEPS) if run.dry_run else (MODELS[MODEL_NAME], STEPS)
    backend = "aot_eager" if run.dry_run else "inductor"
    device = "cpu" if run.dry_run else "cuda"
    found = ["--contender", contender, "--variant", variant, "--backend", backend, "--device", device]
    return found + [f"--{name}={value}" for name, value in {**shape, **steps}.items()]


def label(contender: str, variant: str, warm: bool) -> str:
    return f"{contender}_{variant}{'_warm' if warm else ''}"


def compile_runs(run: Run, result: StepResult, deadline: float) -> None:
    runs = DRY_RUNS if run.dry_run else RUNS
    if not run.dry_run and probe.missing_module("accelerate") is not None:
        runs = tuple(one for one in runs if one[0] != "accelerate")
        result.notes.append("Accelerate does not import here: its compiles are not run")
    with tempfile.TemporaryDirectory(prefix="gpu-check-inductor-") as caches:
        answers, left_out = execute(run, result, runs, Path(caches), deadline)
    report(run, result, answers, left_out)


def execute(
    run: Run, result: StepResult, runs: Runs, caches: Path, deadline: float
) -> tuple[dict[tuple[str, str, bool], dict[str, Any]], list[str]]:
    """Run `runs` (one after the other on a GPU, at once in a dry run); return their answers and the
    labels of the runs the budget could not hold."""
    worker = launchers.worker("compile_job.py")
    slowest: dict[tuple[str, bool], float] = {}  # (variant, warm) -> wall seconds of the slowest run
    answers: dict[tuple[str, str, bool], dict[str, Any]] = {}
    pending = []
    left_out = []
    for contender, variant, warm in runs:
        name = label(contender, variant, warm)
        expected = slowest.get((variant, warm), 0.0) + START_MARGIN_S
        if not run.dry_run and deadline - time.monotonic() < expected:
            left_out.append(name)
            continue
        cache = caches / f"{contender}_{variant}"  # the warm run finds its cold regional run's
        env = {**run.env(), "TORCHINDUCTOR_CACHE_DIR": str(cache), "ACCEL_COMPILE_CACHE_DIR": str(cache)}
        began = time.monotonic()
        process = start(run, result, [sys.executable, worker, *arguments(run, contender, variant)], env)
        if run.dry_run:
            pending.append(((contender, variant, warm), process, name))
            continue
        checked(run, result, answers, (contender, variant, warm), process, deadline)
        took = time.monotonic() - began
        slowest[(variant, warm)] = max(slowest.get((variant, warm), 0.0), took)
    for key, process, _ in pending:
        checked(run, result, answers, key, process, deadline)
    return answers, left_out


def checked(
    run: Run,
    result: StepResult,
    answers: dict[tuple[str, str, bool], dict[str, Any]],
    key: tuple[str, str, bool],
    process: Any,
    deadline: float,
) -> None:
    """Add one run's answer to `answers`, or fail the step naming the run (if it failed, or compiled
    no graph where it had to) and go on with the others."""
    log = f"compile_{label(*key)}"
    done = finish(run, process, log, deadline)
    if done.timed_out:
        result.notes.append(f"{label(*key)} was stopped at the step's deadline (see logs/{log}.log)")
        return
    try:
        found = answer(done, log, 0.0)
        if key[1] != "eager" and not found["graphs"]:
            raise StepError(f"{log} compiled no graph")
    except StepError as error:
        result.fail(str(error))
        return
    answers[key] = found


def report(
    run: Run, result: StepResult, answers: dict[tuple[str, str, bool], dict[str, Any]], left_out: list[str]
) -> None:
    """Fill the step's rows, numbers and summary: times to the first step, steps/s against raw eager
    and against the job's own eager twin, and each contender's full/regional ratio and compiled/eager
    speeds."""
    eager = answers.get(("raw", "eager", False), {}).get("steps_per_s")
    for (contender, variant, warm), found in answers.items():
        result.rows.append(
            {
                "contender": contender,
                "variant": variant + (", warm cache" if warm else ""),
                "first step s": found["first_step_s"],
                "steps/s": found["steps_per_s"],
                "steps/s / raw eager": found["steps_per_s"] / eager if eager else None,
                "steps/s / eager twin": found["steps_per_s"] / found["eager_steps_per_s"],
                "graphs": found["graphs"],
            }
        )
    ratios: dict[str, dict[str, float]] = {}
    for contender in ("raw", "accel", "accelerate"):
        full, regional = answers.get((contender, "full", False)), answers.get((contender, "regional", False))
        own: dict[str, float] = {}
        if full and regional:
            own["full_over_regional"] = full["first_step_s"] / regional["first_step_s"]
        for variant, compiled in (("full", full), ("regional", regional)):
            if compiled and eager:
                own[f"{variant}_over_raw_eager"] = compiled["steps_per_s"] / eager
            if compiled:  # paired in the job: steps alternating with an eager twin by hand
                own[f"{variant}_over_eager_twin"] = compiled["steps_per_s"] / compiled["eager_steps_per_s"]
        if own:
            ratios[contender] = own
    result.numbers.update(model=MODEL_NAME, ratios=ratios, left_out=left_out,
                          regional_speedup_goal=REGIONAL_SPEEDUP)  # fmt: skip
    if left_out:
        result.notes.append(f"left out, the step's budget could not hold them: {', '.join(left_out)}")
    shape = QUICK_MODELS["encoder 2x32"] if run.dry_run else MODELS[MODEL_NAME]
    result.notes.append(
        f"TransformerEncoder {shape['blocks']} layers, d={shape['width']}, seq {shape['sequence']}, batch "
        f"{shape['batch']}, AdamW, fp32; goals: full/regional time to the first step >= {REGIONAL_SPEEDUP:g} "
        "on 12 blocks, compiled steps/s >= raw eager's"
    )
    ours = ratios.get("accel", {})
    parts = [f"{key.replace('_', ' ')} {value:.2f}x" for key, value in ours.items()]
    result.summary = "accel: " + (", ".join(parts) if parts else "no ratio measured")
    if run.dry_run:
        result.summary += " (CPU, aot_eager, tiny: not a measurement)"
