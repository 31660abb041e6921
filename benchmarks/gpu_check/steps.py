"""The GPU check's steps (the package's docstring lists what each checks): each is a function that runs
its commands in fresh processes and fills its `StepResult`; a step that cannot run here says why and
is skipped, one whose command breaks or whose check does not hold fails. Every command has a
deadline, so that a real run stays under 8 minutes in all even when a step hangs.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import launchers, probe
from benchmarks import report as bench_report
from benchmarks.gpu_check.commands import (
    REPO_ROOT,
    Run,
    StepError,
    finish,
    jobs,
    last_line,
    start,
)
from benchmarks.gpu_check.compile_step import compile_runs
from benchmarks.gpu_check.record import StepResult

PRECISIONS = (("fp32", "no"), ("bf16", "bf16"), ("fp16", "fp16"))
# Largest relative difference allowed between a step's loss by hand and through accel. Not zero: CUDA
# kernels (attention's backward) may sum in another order from run to run, and AdamW turns such
# noise in near-zero gradients into lr-sized updates; reduced precision rounds it further.
LOSS_TOLERANCE = {"no": 1e-3, "bf16": 1e-2, "fp16": 1e-2}
SHARDING_TOLERANCE = 1e-3
SHARDING_MODES = ("ddp", "fsdp2", "nd")
# Real runs: a transformer block of width 2048 on 8192 tokens, 3 warm-up then 20 timed steps; a
# residual MLP of 8 blocks of width 2048 on 4096 rows. Dry runs: tiny, 1 + 1 steps.
PRECISION_SIZES = {
    False: ["--width", "2048", "--tokens", "8192", "--warmup", "3", "--steps", "20"],
    True: ["--width", "64", "--tokens", "64", "--warmup", "1", "--steps", "1"],
}
SHARDING_SIZES = {
    False: ["--width", "2048", "--blocks", "8", "--rows", "4096", "--warmup", "2", "--steps", "5"],
    True: ["--width", "32", "--blocks", "2", "--rows", "8", "--warmup", "1", "--steps", "1"],
}
# Seconds each step may take on a real run (the head-to-head gets what is left of the total, at
# least HEAD_TO_HEAD_MIN_S); a dry run gives every step DRY_STEP_S.
BUDGET_S = {"environment": 30, "cuda_tests": 60, "precision": 60, "device_backend": 45, "sharding": 45}
BUDGET_S["compile"] = 150
TOTAL_BUDGET_S, HEAD_TO_HEAD_MIN_S, DRY_STEP_S = 470, 90, 120
# What the training figure lacks, said in the head-to-head step's record.
TRAINING_ON_CPU = (
    "the `training` figure launches CPU processes only (`accel launch --cpu`, "
    "ACCELERATE_USE_CPU=true) and has no CUDA option: the GPU head-to-head is the `precision` "
    "figure, run here"
)


def spec(arguments: list[str], launcher: list[str] | None = None) -> tuple[list[str], list[str]]:
    return (launcher or [sys.executable], arguments)


def device_arguments(run: Run) -> list[str]:
    return ["--device", "cpu" if run.dry_run else "cuda"]


def relative_difference(ours: list[float], theirs: list[float]) -> float:
    """Return the largest |ours - theirs| / |theirs| over the steps (inf when a loss is not finite)."""
    if len(ours) != len(theirs) or not all(map(math.isfinite, [*ours, *theirs])):
        return math.inf
    return max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, theirs, strict=True)), default=0.0)


# 0. environment ------------------------------------------------------------------------------------
def environment(run: Run, result: StepResult, deadline: float) -> None:
    found = jobs(run, result, {"environment": spec(["environment"])}, deadline)["environment"]
    result.numbers.update(found)
    result.rows = [{"what": key, "value": value} for key, value in found.items()]
    if found.get("accel_error"):
        result.fail(f"`import accel` fails: {found['accel_error']}")
    if not run.dry_run and not found.get("device_count"):
        result.fail("torch sees no CUDA device")
    device = found.get("device_name") or "CPU (dry run)"
    result.summary = f"torch {found.get('torch')}, {device}, accel {found.get('accel', 'not importable')}"


# 1. the suite's CUDA tests -------------------------------------------------------------------------
def cuda_test_files() -> list[str]:
    """Return the test files (repo-relative) with a skip condition on CUDA: the tests a GPU runs."""
    condition = re.compile(r"skipif\([^)]*cuda", re.DOTALL)
    folders = [*(REPO_ROOT / "packages").glob("*/tests"), REPO_ROOT / "integration-tests"]
    found = {
        str(path.relative_to(REPO_ROOT))
        for folder in folders
        for path in folder.rglob("test_*.py")
        if condition.search(path.read_text(errors="replace"))
    }
    return sorted(found)


def cuda_tests(run: Run, result: StepResult, deadline: float) -> None:
    files = cuda_test_files()
    result.numbers["files"] = files
    if importlib.util.find_spec("pytest") is None:
        result.skip("pytest is not installed here")
        return
    junit = run.output / "logs" / "cuda_tests.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)  # a report left by an earlier run into this folder
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        f"--junitxml={junit}",
        *files,
    ]
    env = {**run.env(), "ACCEL_DEBUG_MODE": "1"}  # as the suite runs them (noxfile.py's TEST_ENV)
    done = finish(run, start(run, result, command, env), "cuda_tests", deadline)
    if done.timed_out:
        raise StepError("pytest timed out; see logs/cuda_tests.log")
    if not junit.exists():
        raise StepError(
            f"pytest exited {done.returncode} without a report: {last_line(done.stderr + done.stdout)}"
        )
    result.rows = junit_outcomes(junit)
    counts = {
        outcome: sum(row["outcome"] == outcome for row in result.rows)
        for outcome in ("passed", "skipped", "failed")
    }
    result.numbers.update(counts)
    result.summary = ", ".join(f"{count} {outcome}" for outcome, count in counts.items())
    if counts["failed"] or done.returncode != 0:
        result.fail(f"pytest exited {done.returncode}: {last_line(done.stdout)}")
    elif not counts["passed"]:
        reasons = sorted({row["reason"] for row in result.rows if row["reason"]})
        result.skip(f"all {counts['skipped']} skipped ({'; '.join(reasons)})")


def junit_outcomes(junit: Path) -> list[dict[str, Any]]:
    """Return one row per test case of a pytest junit XML report: test, outcome, reason."""
    rows = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "skipped" if child.tag == "skipped" else "failed"
                reason = last_line(child.get("message") or "")[:200]
        rows.append(
            {"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "reason": reason}
        )
    return rows


# 2. precision ---------------------------------------------------------------------------------------
def precision(run: Run, result: StepResult, deadline: float) -> None:
    sizes = PRECISION_SIZES[run.dry_run]
    specs = {
        f"precision_{label}": spec(["precision", "--precision", mode, *device_arguments(run), *sizes])
        for label, mode in PRECISIONS
    }
    found = jobs(run, result, specs, deadline)
    fp32 = found["precision_fp32"]
    matches = {}
    for label, mode in PRECISIONS:
        one = found[f"precision_{label}"]
        difference = relative_difference(one["accel"]["losses"], one["raw"]["losses"])
        matches[label] = difference <= LOSS_TOLERANCE[mode]
        result.rows.append(
            {
                "precision": label,
                "raw steps/s": one["raw"]["steps_per_s"],
                "accel steps/s": one["accel"]["steps_per_s"],
                "accel/raw": one["accel"]["steps_per_s"] / one["raw"]["steps_per_s"],
                "raw speed-up over fp32": one["raw"]["steps_per_s"] / fp32["raw"]["steps_per_s"],
                "accel speed-up over fp32": one["accel"]["steps_per_s"] / fp32["accel"]["steps_per_s"],
                "accel peak MB": one["accel"]["max_memory_mb"],
                "max loss difference": difference,
                "tolerance": LOSS_TOLERANCE[mode],
                "losses match": matches[label],
            }
        )
        if not matches[label]:
            result.fail(
                f"{label}: accel's losses differ from the loop by hand's by {difference:.3g} (relative), "
                f"over {LOSS_TOLERANCE[mode]}"
            )
    result.numbers.update(runs=found, losses_match=all(matches.values()), matches=matches)
    result.notes.append(
        "loss tolerance (relative, each step): "
        + ", ".join(f"{label} {LOSS_TOLERANCE[mode]:g}" for label, mode in PRECISIONS)
        + "; not zero because CUDA kernels may "
        "sum in another order from run to run and AdamW turns that noise into lr-sized updates"
    )
    speedups = ", ".join(
        f"{row['precision']} {row['accel speed-up over fp32']:.2f}x" for row in result.rows[1:]
    )
    result.summary = (
        f"losses match: {'all' if all(matches.values()) else 'NO'}; accel speed-up over fp32: {speedups}"
    )
    if run.dry_run:
        result.summary += " (CPU, tiny: not a measurement)"


# 3. device and process group -----------------------------------------------------------------------
def device_backend(run: Run, result: StepResult, deadline: float) -> None:
    if importlib.util.find_spec("click") and importlib.util.find_spec("yaml"):
        launcher = [
            *launchers.console("accel", "accel_launch.commands.cli"),
            "launch",
            "--num_processes",
            "1",
        ]
        launcher += ["--cpu"] if run.dry_run else []
    else:
        result.notes.append(
            "click or yaml does not import here (`accel launch` needs both): torchrun instead"
        )
        launcher = launchers.torchrun(1)
    specs = {"device_accel": spec(["device", *device_arguments(run)], launcher)}
    reference = None if run.dry_run else probe.missing_module("accelerate")
    if reference is None and not run.dry_run:
        specs["device_accelerate"] = spec(
            ["device", "--library", "accelerate", *device_arguments(run)], launchers.torchrun(1)
        )
    found = jobs(run, result, specs, deadline)
    # A lone process joins no process group in accel (it needs none; the FSDP2 runs of the sharding
    # step join a group of one), and a lone CPU process none in Accelerate either.
    expected = {"device": "cpu" if run.dry_run else "cuda", "process_group": None}
    ours = found["device_accel"]
    result.rows = [{**answered, "expected": ""} for answered in found.values()]
    result.rows[0]["expected"] = ", ".join(f"{key} {value}" for key, value in expected.items())
    result.numbers.update(expected=expected, accel=ours, accelerate=found.get("device_accelerate"))
    if run.dry_run:
        result.notes.append(
            "dry run: a lone CPU process joins no process group, in Accelerate as in accel; "
            "Accelerate's own answer is not asked for"
        )
    elif "device_accelerate" not in found:
        result.notes.append(f"Accelerate's answer in the same world is not asked for: {reference}")
    for key, value in expected.items():
        if ours[key] != value:
            theirs = found.get("device_accelerate", {}).get(key, "not run")
            result.fail(
                f"{key} is {ours[key]!r}, expected {value!r} (distributed type {ours['distributed_type']}; "
                f"Accelerate in a 1-process torchrun world: {theirs!r})"
            )
    result.summary = (
        f"device {ours['device']}, process group {ours['process_group']}, {ours['distributed_type']}"
    )


# 4. DDP, FSDP2, N-D ---------------------------------------------------------------------------------
def sharding(run: Run, result: StepResult, deadline: float) -> None:
    sizes = SHARDING_SIZES[run.dry_run]
    specs = {
        f"sharding_{mode}": spec(["sharding", "--mode", mode, *device_arguments(run), *sizes])
        for mode in SHARDING_MODES
    }
    found = {
        key.removeprefix("sharding_"): value for key, value in jobs(run, result, specs, deadline).items()
    }
    ddp = found["ddp"]
    for mode, one in found.items():
        difference = relative_difference(one["losses"], ddp["losses"])
        result.rows.append(
            {
                "mode": mode,
                "what": one["what"],
                "wrapper": one["wrapper"],
                "steps/s": one["steps_per_s"],
                "peak MB": one["max_memory_mb"],
                "max loss difference to ddp": difference,
            }
        )
        if difference > SHARDING_TOLERANCE:
            result.fail(
                f"{mode}: losses differ from raw DDP's by {difference:.3g} (relative), "
                f"over {SHARDING_TOLERANCE}"
            )
    result.notes.append(
        "one device: FSDP2 shards over a group of one, so it holds what DDP holds; the "
        "peak shows its overhead, not a saving"
    )
    peaks = {mode: one["max_memory_mb"] for mode, one in found.items()}
    result.numbers.update(runs=found, peak_mb=peaks)
    if peaks["ddp"]:
        ratio = peaks["fsdp2"] / peaks["ddp"]
        result.numbers["fsdp2_over_ddp_peak"] = ratio
        result.summary = f"peak memory FSDP2/DDP {ratio:.2f}x ({peaks['fsdp2']:.0f} / {peaks['ddp']:.0f} MB)"
    else:
        result.summary = "all modes ran; peak GPU memory: n/a on the CPU"


# 6. head-to-head against Accelerate ----------------------------------------------------------------
def head_to_head(run: Run, result: StepResult, deadline: float) -> None:
    result.notes.append(TRAINING_ON_CPU)
    missing = probe.missing_module("accelerate")
    if missing is not None:
        result.skip(f"Accelerate is absent, so there is nothing to race: {missing}")
        return
    folder = run.output / "head_to_head"
    earlier = set(folder.glob("*.json"))
    rounds = ["--quick"] if run.dry_run else ["--rounds", "3"]
    command = [sys.executable, "-m", "benchmarks", "--only", "precision", *rounds, "--output", str(folder)]
    done = finish(run, start(run, result, command), "head_to_head", deadline)
    if done.timed_out:
        raise StepError("the precision figure timed out; see logs/head_to_head.log")
    # This run's results file, not one an earlier run left in the folder.
    written = sorted(set(folder.glob("*.json")) - earlier, key=lambda path: path.stat().st_mtime)
    latest = written[-1] if written else None
    if latest is None:
        raise StepError(f"python -m benchmarks exited {done.returncode}: {last_line(done.stderr)}")
    record = bench_report.load(latest)
    result.numbers["results_file"] = str(latest.relative_to(run.output))
    for measured in record["measurements"]:
        medians = {name: cell["median"] for name, cell in measured["summary"].items()}
        ratios = {name: cell["median"] for name, cell in measured["ratios"].items()}
        result.rows.append(
            {
                "figure": measured["figure"],
                "unit": measured["unit"],
                "raw": medians.get("raw"),
                "accel": medians.get("accel"),
                "Accelerate": medians.get("accelerate"),
                "accel/raw": ratios.get("accel/raw"),
                "accel/Accelerate": ratios.get("accel/accelerate"),
                "skipped": measured["skipped"],
            }
        )
    errors = [f"{name}: {figure['error']}" for name, figure in record["figures"].items() if figure["error"]]
    if errors or done.returncode != 0:
        result.fail("; ".join(errors) or f"python -m benchmarks exited {done.returncode}")
    elif result.rows and all(row["skipped"] for row in result.rows):
        result.skip(result.rows[0]["skipped"])
    speedups = [row for row in result.rows if "speed-up" in row["figure"] and not row["skipped"]]
    result.summary = "; ".join(
        f"{row['figure']}: accel/Accelerate {row['accel/Accelerate']:.3f}" for row in speedups
    ) or ("no GPU figure measured")


StepFunction = Callable[[Run, StepResult, float], None]
STEPS: tuple[tuple[str, str, StepFunction], ...] = (
    ("environment", "environment: torch, the CUDA device, our dependencies", environment),
    ("cuda_tests", "the suite's CUDA tests (pytest)", cuda_tests),
    ("precision", "fp32 / bf16 / fp16: Accelerator(mixed_precision) vs the loop by hand", precision),
    (
        "device_backend",
        "Accelerator() in a 1-process `accel launch` world: device and process group",
        device_backend,
    ),
    ("sharding", "raw DDP vs FSDP2 vs an N-D mesh of ones on one device: a few steps, peak memory", sharding),
    ("compile", "torch.compile: full vs regional vs eager on the 12-block encoder (inductor)", compile_runs),
    ("head_to_head", "head-to-head against Accelerate: the benchmarks' precision figure", head_to_head),
)


def deadline_of(name: str, run: Run, started: float) -> float:
    """Return the monotonic time by which step `name` must end."""
    if run.dry_run:
        return time.monotonic() + DRY_STEP_S
    if name == "head_to_head":
        left = TOTAL_BUDGET_S - (time.perf_counter() - started)
        return time.monotonic() + max(HEAD_TO_HEAD_MIN_S, left)
    return time.monotonic() + BUDGET_S[name]


def run_step(run: Run, started: float, name: str, title: str, function: StepFunction) -> StepResult:
    """Run one step, timed; its failure (a failed command, or a bug) is recorded, never raised."""
    result = StepResult(name, title)
    print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    try:
        function(run, result, deadline_of(name, run, started))
    except StepError as error:
        result.fail(str(error))
    except Exception as error:  # noqa: BLE001 - one step's bug must not lose the others' results
        result.fail(f"{type(error).__name__}: {error}")
    result.seconds = round(time.perf_counter() - began, 1)
    print(
        f"gpu_check: {name} {result.status} in {result.seconds} s {result.reason}",
        file=sys.stderr,
        flush=True,
    )
    return result


def run_all(
    run: Run,
    started: float,
    after_step: Callable[[list[StepResult], int], None] | None = None,
    only: list[str] | None = None,
) -> list[StepResult]:
    """Run every step (or the environment and those named in `only`) and return their results in order.
    On a GPU one after the other (each is timed alone), calling `after_step` with the results so far
    and the number of steps left after each, so that a check cut short still leaves what it measured
    (and a GPU at hand briefly can take the check in parts); a dry run starts them all at once, to stay
    within a minute on two cores."""
    chosen = [step for index, step in enumerate(STEPS) if only is None or index == 0 or step[0] in only]
    if not run.dry_run:
        done: list[StepResult] = []
        for step in chosen:
            done.append(run_step(run, started, *step))
            if after_step is not None:
                after_step(done, len(chosen) - len(done))
        return done
    with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
        futures = [pool.submit(run_step, run, started, *step) for step in chosen]
        return [future.result() for future in futures]
