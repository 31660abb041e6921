"""torch.compile (inductor, CPU): time to the first training step, compile included, and steps/s after
warm-up, eager vs full compile vs regional compile vs regional with a warm cache.

Two models: the training figures' encoder (4 layers, d=256, seq 128, batch 4) and a 12-block one.
Every measurement is a fresh process of one thread (`workers/compile_job.py`) with a fresh inductor
cache folder, except "regional, warm cache": a second process reusing the cold regional run's folder
(what a relaunch of the same script finds). raw is the loop by hand (eager; `torch.compile(model)`;
`torch.compile` of each encoder layer); accel and Accelerate compile in `prepare` through their
`TorchDynamoPlugin`. The contenders rotate round by round. Steps/s are shown relative to raw eager
in the same process: each job times its steps in chunks alternating with an eager twin by hand (the
same model as built, its own AdamW), so the ratio is paired within the job and the machine's drift
between jobs stays out of it; accel/Accelerate there is the ratio of their speeds. Targets: regional compiles
>= 3x faster than full on 12 blocks; compiled steps/s >= eager; accel within 3% of Accelerate.
A quick run compiles one tiny model with `aot_eager` (inductor's C++ builds take a minute each).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import ACCEL, Measurement, RunOptions

MODELS = {
    "encoder 4x256": {"blocks": 4, "width": 256, "heads": 4, "sequence": 128, "batch": 4},
    "encoder 12x256": {"blocks": 12, "width": 256, "heads": 4, "sequence": 128, "batch": 4},
}
QUICK_MODELS = {"encoder 2x32": {"blocks": 2, "width": 32, "heads": 2, "sequence": 16, "batch": 2}}
STEPS = {"warmup": 3, "steps": 20, "chunks": 4}
QUICK_STEPS = {"warmup": 1, "steps": 3, "chunks": 2}
# (label, worker --variant, reuses the cold regional run's cache)
VARIANTS = (
    ("eager", "eager", False),
    ("full compile", "full", False),
    ("regional compile", "regional", False),
    ("regional, warm cache", "regional", True),
)
AS_ACCELERATE = f"{ACCEL}/accelerate<=1.03"
SPEED_TARGET = f"{ACCEL}>=1.0;{ACCEL}/accelerate>=0.97"
REGIONAL_SPEEDUP = 3.0


@contextmanager
def _cache_folders() -> Iterator[Path]:
    """Yield a folder under which each cold run makes its own cache folder; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="accel-bench-compile-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(contender: str, variant: str, shape: dict[str, int], steps: dict[str, int], backend: str,
         cache: Path) -> dict[str, Any]:  # fmt: skip
    arguments = ["--contender", contender, "--variant", variant, "--backend", backend]
    arguments += [f"--{name}={value}" for name, value in {**shape, **steps}.items()]
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "ACCEL_COMPILE_CACHE_DIR": str(cache)}
    answer = run_job(contender, "compile_job.py", arguments, extra_env=env, timeout=1800)
    if variant != "eager" and not answer["graphs"]:
        raise RuntimeError(f"compile_job: {contender}'s {variant} run compiled no graph")
    return answer


def _progress(what: str, answer: dict[str, Any]) -> None:
    """Say on stderr what one job measured, as it ends (a full run takes long)."""
    print(
        f"benchmarks: compile {what}: first step {answer['first_step_s']:.1f} s, "
        f"{answer['steps_per_s']:.2f} steps/s",
        file=sys.stderr,
        flush=True,
    )


def _measure_model(
    shape: dict[str, int], steps: dict[str, int], backend: str, options: RunOptions
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Return variant label -> contender -> one answer per round."""
    answers: dict[str, dict[str, list[dict[str, Any]]]] = {label: {} for label, _, _ in VARIANTS}
    with _cache_folders() as root:
        for round_index in range(1 if options.quick else options.rounds):
            for contender in round_order(options.contenders, round_index):
                cold_regional = root  # replaced by the cold regional run's folder before the warm run
                for label, variant, warm in VARIANTS:
                    cache = cold_regional if warm else Path(tempfile.mkdtemp(dir=root))
                    if variant == "regional" and not warm:
                        cold_regional = cache
                    answer = _run(contender, variant, shape, steps, backend, cache)
                    _progress(
                        f"{shape['blocks']} blocks, round {round_index + 1}, {contender}, {label}", answer
                    )
                    answers[label].setdefault(contender, []).append(answer)
    return answers


def measure(options: RunOptions) -> list[Measurement]:
    """Return per model: seconds to the first step per variant, full/regional compile-time ratio, and
    steps/s of each variant relative to raw eager."""
    models = QUICK_MODELS if options.quick else MODELS
    steps = QUICK_STEPS if options.quick else STEPS
    backend = "aot_eager" if options.quick else "inductor"
    results = []
    for name, shape in models.items():
        answers = _measure_model(shape, steps, backend, options)
        note = (
            f"{backend} on CPU, 1 process x 1 thread; TransformerEncoder {shape['blocks']} layers, "
            f"d={shape['width']}, seq {shape['sequence']}, batch {shape['batch']}, AdamW, fp32; a fresh "
            "process and inductor cache per run (the warm run reuses the cold regional run's); raw: by "
            "hand (torch.compile of the model or of each layer); accel, accelerate: TorchDynamoPlugin"
        )
        group = f"compile {name}"
        for label, _, _ in VARIANTS:
            results.append(
                Measurement(
                    figure=f"compile {name}: first step, {label}",
                    group=f"{group} time",
                    unit="s",
                    higher_is_better=False,
                    samples={c: [a["first_step_s"] for a in answers[label][c]] for c in options.contenders},
                    note=note + "; the first step includes prepare and compilation",
                    target=None if label == "eager" else AS_ACCELERATE,
                )
            )
        full, regional = answers["full compile"], answers["regional compile"]
        results.append(
            Measurement(
                figure=f"compile {name}: full/regional time to first step",
                group=f"{group} speed",
                unit="x",
                higher_is_better=True,
                samples={
                    c: [
                        f["first_step_s"] / r["first_step_s"]
                        for f, r in zip(full[c], regional[c], strict=True)
                    ]
                    for c in options.contenders
                },
                note=note,
                target=f"{ACCEL}>={REGIONAL_SPEEDUP:g}" if shape["blocks"] >= 12 else None,
            )
        )
        for label, _, _ in VARIANTS:
            results.append(
                Measurement(
                    figure=f"compile {name}: steps/s, {label} / raw eager",
                    group=f"{group} speed",
                    unit="x",
                    higher_is_better=True,
                    samples={
                        c: [a["steps_per_s"] / a["eager_steps_per_s"] for a in answers[label][c]]
                        for c in options.contenders
                    },
                    note=note + f"; {steps['steps']} steps timed after {steps['warmup']} of warm-up, in "
                    f"{steps['chunks']} chunks alternating with as many steps of an eager twin by hand "
                    "in the same process (the ratio to it)",
                    target=None if label == "eager" else SPEED_TARGET,
                )
            )
    return results
