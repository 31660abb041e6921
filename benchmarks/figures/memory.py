"""Peak resident memory per rank: DDP vs FSDP2 vs DeepSpeed ZeRO-3, on 2 and 4 CPU processes.

A model of about 200 MB of fp32 weights (LAYERS Linear layers of width WIDTH) trains a few AdamW
steps in one job per (contender, backend, process count) (`workers/memory_job.py`). Under DDP each
rank holds the whole model, its gradients and AdamW's two moments (about 4x the weights); under
FSDP2 and ZeRO-3 each rank holds 1/N of them plus the layers it gathers for the moment, so their
peak must fall as processes are added.

Every job runs with glibc's mmap threshold fixed at 64 KiB (`MALLOC_MMAP_THRESHOLD_`): by default
glibc raises it to the largest block freed, after which freed gradient and communication buffers
stay in the heap and the resident set keeps every buffer the job ever held (measured: a raw FSDP2
loop on gloo then peaks at DDP's size). With the fixed threshold a freed buffer leaves the process,
so the peak is what training needed at once.

Contenders: raw is the same training written by hand on torch (or on DeepSpeed's engine), accel
the same through `Accelerator`, Accelerate (DDP only: 1.15 runs FSDP and DeepSpeed only on an
accelerator device) through its `Accelerator`. ZeRO-3 runs only where deepspeed imports. Each
sample is the mean over ranks of the peak RSS above the process's start (after its process
group is up); the contenders' order rotates from round to round.
"""

from __future__ import annotations

from benchmarks import probe
from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import ACCELERATE, Measurement, RunOptions

WIDTH, LAYERS, BATCH = 2048, 12, 8  # 12 * (2048 * 2048 + 2048) * 4 bytes = 201 MB
PROCESS_COUNTS, QUICK_PROCESS_COUNTS = (2, 4), (2,)
STEPS = 3
QUICK = {"layers": 2, "width": 256, "batch": 4, "steps": 1}
BACKENDS = {"ddp": "DDP", "fsdp": "FSDP2", "zero3": "ZeRO-3"}
QUICK_BACKENDS = ("ddp", "fsdp")
MEMORY_ROUNDS = 2
ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "DS_ACCELERATOR": "cpu"}
NOTES = {
    "ddp": "raw: DistributedDataParallel + AdamW by hand; accel, accelerate: Accelerator().prepare",
    "fsdp": (
        "built on rank 0 (meta elsewhere); raw: fully_shard per Linear + set_model_state_dict("
        "broadcast_from_rank0); accel: FSDP plugin with cpu_ram_efficient_loading; Accelerate: no FSDP on CPU"
    ),
    "zero3": "raw: deepspeed.initialize (stage 3) by hand; accel: DeepSpeedPlugin(zero_stage=3); "
    "Accelerate: no DeepSpeed on CPU",
}


def measure(options: RunOptions) -> list[Measurement]:
    """Return one Measurement per (backend, process count), x = process count, in MB per rank."""
    quick = options.quick
    counts = QUICK_PROCESS_COUNTS if quick else PROCESS_COUNTS
    model = QUICK if quick else {"layers": LAYERS, "width": WIDTH, "batch": BATCH, "steps": STEPS}
    arguments = [f"--{name}={model[name]}" for name in ("layers", "width", "batch", "steps")]
    backends = list(QUICK_BACKENDS if quick else BACKENDS)
    skipped = {}
    if "zero3" in backends and (why := probe.missing_module("deepspeed", **ENV)):
        skipped["zero3"] = why
        backends.remove("zero3")
    samples: dict[tuple[str, int], dict[str, list[float]]] = {}
    # Peak memory is all but deterministic (contenders differed by < 0.3% between rounds), and a round
    # of 14 jobs takes minutes: two rounds show the spread.
    for round_index in range(1 if quick else min(options.rounds, MEMORY_ROUNDS)):
        for processes in counts:
            for backend in backends:
                contenders = [c for c in options.contenders if backend == "ddp" or c != ACCELERATE]
                for contender in round_order(contenders, round_index):
                    answer = run_job(
                        contender,
                        "memory_job.py",
                        [contender, backend, *arguments],
                        processes=processes,
                        extra_env=ENV,
                    )
                    peaks = answer["peaks_mb"]
                    per_contender = samples.setdefault((backend, processes), {})
                    per_contender.setdefault(contender, []).append(sum(peaks) / len(peaks))
    measurements = []
    for backend in BACKENDS:
        for processes in counts:
            if backend not in backends and backend not in skipped:
                continue
            measurements.append(
                Measurement(
                    figure=f"peak RSS per rank, {BACKENDS[backend]}, {processes} processes",
                    group="memory",
                    unit="MB per rank",
                    higher_is_better=False,
                    samples=samples.get((backend, processes), {}),
                    x=float(processes),
                    x_label="processes",
                    note=f"{model['layers']} x Linear {model['width']} + AdamW, {model['steps']} steps; "
                    + NOTES[backend],
                    series=BACKENDS[backend],
                    skipped=skipped.get(backend),
                )
            )
    return measurements
