"""N-D parallelism on 4 CPU processes: steps/s and peak memory per rank of one model on each mesh
shape, accel against the same composition written by hand in torch.

Shapes: DDP (4 replicas), FSDP2 (dp_shard 4), HSDP (dp_replicate 2 x dp_shard 2) and FSDP2 x TP
(dp_shard 2 x tp 2), each one job per contender and round (`workers/nd_job.py`): BLOCKS residual
MLP blocks of width WIDTH, AdamW, a global batch of 32 rows split over the data parallel ranks.
raw builds the mesh, the tensor parallel split and `fully_shard` by hand; accel is
`Accelerator(parallelism_config=...)`. Memory is each rank's peak RSS above its start (the mean
over ranks), under glibc's fixed mmap threshold (see `benchmarks.figures.memory`), each contender in
its own job.

Steps/s is paired within accel's job: after its memory is taken, the job builds four fresh copies
of the model, hand-written, accel, accel, hand-written, and times PAIRS steps of each side, every
copy in turn. Four processes on two cores make one job's steps 10-20% faster or slower than the
next job's; within one job both sides meet the same host. The order of the copies cancels what
building order does: a later copy of the very same code runs a few % slower or faster than the
earlier one, and the note gives that figure ("the same code, later copy") as the floor of what the
ratio can resolve here. Each job's own steps/s alone is in the note too.
Last, the job runs two steps of each side under cProfile (`workers/step_work.py`): what accel's step
adds to the hand-written one (its own code, and the calls the hand-written step does not make), in %
of the hand-written step. The clock here cannot tell 1% apart; that count can: an added share
<= 1% means steps/s >= 0.99x hand-written on any machine that runs the same torch work as fast for both.
Targets: steps/s >= 0.99x hand-written; accel's own work <= 1% of the step; memory within 2% of
hand-written.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.added_work import added_work
from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

WIDTH, BLOCKS, STEPS, PROCESSES = 512, 6, 8, 4  # 6 * 2 * 512 * 2048 * 4 bytes = 50 MB of fp32 weights
PAIRS, QUICK_PAIRS = 16, 2
WORK_NOTE = "the first copy of each side in accel's job, on the rank where accel adds the most"
QUICK = {"width": 64, "blocks": 2, "steps": 2}
SHAPES = {"ddp": "DDP", "fsdp": "FSDP2", "hsdp": "HSDP 2x2", "fsdp_tp": "FSDP2 x TP 2x2"}
QUICK_SHAPES = ("fsdp_tp",)
ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "OMP_NUM_THREADS": "1"}
NOTE = (
    "4 processes x 1 thread, residual MLP blocks + AdamW, global batch 32; raw: init_device_mesh, "
    "parallelize_module and fully_shard by hand (DDP for DDP); accel: Accelerator(parallelism_config=...)"
)


def measure(options: RunOptions) -> list[Measurement]:
    """Return steps/s and memory per rank for each mesh shape (x: the shape's index)."""
    quick = options.quick
    model = QUICK if quick else {"width": WIDTH, "blocks": BLOCKS, "steps": STEPS}
    arguments = [f"--{name}={value}" for name, value in model.items()]
    shapes = list(QUICK_SHAPES if quick else SHAPES)
    contenders = [c for c in options.contenders if c in (RAW, ACCEL)]
    pairs = QUICK_PAIRS if quick else PAIRS
    # shape -> contender -> one value per round; "job/<contender>": its own job's steps/s alone,
    # "later/<contender>": its later copy's steps/s over its earlier one's in the paired steps.
    speed: dict[str, dict[str, list[float]]] = {shape: {} for shape in shapes}
    memory: dict[str, dict[str, list[float]]] = {shape: {} for shape in shapes}
    work: dict[str, list[dict[str, Any]]] = {shape: [] for shape in shapes}
    for round_index in range(1 if quick else options.rounds):
        for shape in shapes:
            for contender in round_order(contenders, round_index):
                pairs_flag = [f"--pairs={pairs}"] if contender == ACCEL and RAW in contenders else []
                answer = run_job(
                    contender,
                    "nd_job.py",
                    [contender, shape, *arguments, *pairs_flag],
                    processes=PROCESSES,
                    extra_env=ENV,
                )
                speed[shape].setdefault(f"job/{contender}", []).append(answer["steps_per_s"])
                paired = answer.get("paired", {"steps_per_s": {}, "later_copy": {}})
                for side, steps_per_s in paired["steps_per_s"].items():
                    speed[shape].setdefault(side, []).append(steps_per_s)
                for side, ratio in paired["later_copy"].items():
                    speed[shape].setdefault(f"later/{side}", []).append(ratio)
                if "work" in paired:
                    work[shape].append(paired["work"])
                peaks = answer["peaks_mb"]
                memory[shape].setdefault(contender, []).append(sum(peaks) / len(peaks))
    measurements = []
    for index, shape in enumerate(shapes):
        common = {"x": float(index), "x_label": "mesh (" + ", ".join(SHAPES[s] for s in shapes) + ")"}
        note = f"{model['blocks']} blocks of width {model['width']}; " + NOTE
        samples = {c: speed[shape][c] for c in contenders if c in speed[shape]}
        alone = ", ".join(f"{c} {statistics.median(speed[shape][f'job/{c}']):.4g}" for c in contenders)
        if samples:
            later = ", ".join(f"{c} {statistics.median(speed[shape][f'later/{c}']):.3f}" for c in contenders)
            how = f"{pairs} steps of each side in accel's job, on copies built raw, accel, accel, raw"
            how += f" (the same code, later copy over earlier: {later})"
        else:  # accel alone, or raw alone: each job's own steps/s
            samples = {c: speed[shape][f"job/{c}"] for c in contenders}
            how = "each job's own steps"
        measurements.append(
            Measurement(
                figure=f"N-D train, {SHAPES[shape]}",
                group="nd_parallel",
                unit="steps/s",
                higher_is_better=True,
                samples=samples,
                note=f"{note}; steps/s: {how}; each job's own steps/s alone: {alone}",
                target="accel/raw>=0.99",
                series="steps/s",
                **common,
            )
        )
        if work[shape]:
            raw_seconds = [1 / rate for rate in speed[shape][RAW]]
            figure = f"N-D accel's own work per step, {SHAPES[shape]}"
            group = "nd_parallel_work"
            measurements.append(
                added_work(figure, group, work[shape], raw_seconds, "step", WORK_NOTE, note, **common)
            )
        measurements.append(
            Measurement(
                figure=f"N-D peak RSS per rank, {SHAPES[shape]}",
                group="nd_parallel_memory",
                unit="MB per rank",
                higher_is_better=False,
                samples=memory[shape],
                note=note,
                target="accel/raw<=1.02;accel/raw>=0.98",
                series="peak RSS per rank",
                **common,
            )
        )
    return measurements
