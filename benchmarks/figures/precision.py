"""Mixed precision on one CUDA device: a transformer block (width 2048, 8192 tokens per step, AdamW)
trained in fp32, bf16 and fp16, by hand (autocast, and a GradScaler for fp16), through accel and
through Accelerate (`mixed_precision=`): the bf16/fp16 speed-up over fp32 (taken within each
round), steps/s and peak memory. Without a CUDA device the figure is listed as skipped, with why.

One job per contender and precision; blocks of steps alternate between the jobs round by round, the
rounds spread over `blockjobs.STARTS` starts of the jobs. The nine jobs hold the device at once:
where their estimated memory (`job_bytes`) does not fit in what the device has free, the figure is
skipped saying so, instead of nine jobs running out of memory half way.
"""

from __future__ import annotations

import sys

from benchmarks import blockjobs, launchers, probe
from benchmarks.measurement import Measurement, RunOptions
from benchmarks.workers.gpu_precision import TOKENS, WIDTH

PRECISIONS = (("fp32", "no"), ("bf16", "bf16"), ("fp16", "fp16"))
STEPS, QUICK_STEPS = 20, 3
# A process's CUDA context and libraries on the device, beside its tensors (measured elsewhere at
# 0.5-0.6 GB; rounded up).
CONTEXT_BYTES = 1 << 30
# Room left to the allocator's rounding and to whatever else holds the device.
FREE_SHARE = 0.85


def job_bytes(width: int, tokens: int) -> int:
    """Return one job's estimated device memory at its fp32 peak: the block's 12 w^2 parameters with
    their gradients and AdamW's two states (16 bytes each), the tensors kept for backward (39 fp32
    values of width w per token, counted through saved-tensor hooks on the CPU at widths 256 and
    512, the 4w-wide feed-forward's among them; 40 here), and a context. At width 4096 nine jobs
    would need about 81 GiB, more than an 80 GB device holds."""
    return 16 * 12 * width * width + 4 * 40 * tokens * width + CONTEXT_BYTES


def too_big(jobs: int, width: int, tokens: int) -> str | None:
    """Return why `jobs` jobs of this shape would not fit on the device at once, or None if they fit
    (or the free memory cannot be read: the jobs then say so themselves)."""
    free = probe.free_cuda_bytes()
    need = jobs * job_bytes(width, tokens)
    if free is None or need <= FREE_SHARE * free:
        return None
    return (
        f"{jobs} jobs of width {width} x {tokens} tokens need about {need / 2**30:.1f} GiB at once; "
        f"the device has {free / 2**30:.1f} GiB free"
    )


def measure(options: RunOptions) -> list[Measurement]:
    """Per contender and precision: speed-up over fp32 (within each round), steps/s and peak memory."""
    missing = probe.missing_cuda()
    if missing:
        return [Measurement("gpu bf16/fp16 speed-up over fp32", "gpu", "x", True, skipped=missing)]
    steps = QUICK_STEPS if options.quick else STEPS
    width, tokens = (1024, 2048) if options.quick else (WIDTH, TOKENS)
    crowded = too_big(len(options.contenders) * len(PRECISIONS), width, tokens)
    if crowded:
        return [Measurement("gpu bf16/fp16 speed-up over fp32", "gpu", "x", True, skipped=crowded)]
    specs = {}
    for contender in options.contenders:
        for _, precision in PRECISIONS:
            command = [sys.executable, launchers.worker("gpu_precision.py"), "--contender", contender,
                       "--precision", precision, "--steps", str(steps)]  # fmt: skip
            command += ["--width", str(width), "--tokens", str(tokens)]
            specs[f"{contender}:{precision}"] = blockjobs.JobSpec(command, launchers.child_env(), 1)
    warmup = 0 if options.quick else 1
    answers = blockjobs.interleaved_in_starts(specs, ["step"], options.rounds, warmup=warmup)["step"]
    results = []
    for label, precision in PRECISIONS:
        rates = {c: [a["rate"] for a in answers[f"{c}:{precision}"]] for c in options.contenders}
        if precision != "no":
            fp32 = {c: [a["rate"] for a in answers[f"{c}:no"]] for c in options.contenders}
            results.append(Measurement(
                f"gpu {label} speed-up over fp32", "gpu", "x", True,
                samples={c: [r / base for r, base in zip(rates[c], fp32[c], strict=True)] for c in rates},
                note=f"one CUDA device, a transformer block (width {width}, {tokens} tokens per step), "
                "AdamW; raw: autocast and GradScaler by hand; accel and Accelerate: mixed_precision=",
            ))  # fmt: skip
        results.append(Measurement(f"gpu {label} steps/s", "gpu", "steps/s", True, samples=rates))
        peaks = {c: [a["max_memory_mb"] for a in answers[f"{c}:{precision}"]] for c in options.contenders}
        results.append(
            Measurement(f"gpu {label} max memory allocated", "gpu memory", "MB", False, samples=peaks)
        )
    return results
