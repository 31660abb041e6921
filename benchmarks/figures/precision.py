"""Mixed precision on one CUDA device: a transformer block (width 4096, 8192 tokens per step, AdamW)
trained in fp32, bf16 and fp16, by hand (autocast, and a GradScaler for fp16), through accel and
through Accelerate (`mixed_precision=`): the bf16/fp16 speed-up over fp32 (taken within each
round), steps/s and peak memory. Without a CUDA device the figure is listed as skipped, with why.

One job per contender and precision; blocks of steps alternate between the jobs round by round, the
rounds spread over `blockjobs.STARTS` starts of the jobs.
"""

from __future__ import annotations

import sys

from benchmarks import blockjobs, launchers, probe
from benchmarks.measurement import Measurement, RunOptions

PRECISIONS = (("fp32", "no"), ("bf16", "bf16"), ("fp16", "fp16"))
STEPS, QUICK_STEPS = 20, 3
# A quick run's block: small enough for any CUDA device, in seconds.
QUICK_SHAPE = ["--width", "1024", "--tokens", "2048"]


def measure(options: RunOptions) -> list[Measurement]:
    """Per contender and precision: speed-up over fp32 (within each round), steps/s and peak memory."""
    missing = probe.missing_cuda()
    if missing:
        return [Measurement("gpu bf16/fp16 speed-up over fp32", "gpu", "x", True, skipped=missing)]
    steps = QUICK_STEPS if options.quick else STEPS
    specs = {}
    for contender in options.contenders:
        for _, precision in PRECISIONS:
            command = [sys.executable, launchers.worker("gpu_precision.py"), "--contender", contender,
                       "--precision", precision, "--steps", str(steps)]  # fmt: skip
            if options.quick:
                command += QUICK_SHAPE
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
                note="one CUDA device, a transformer block (width 4096, 8192 tokens per step), AdamW; raw: "
                "autocast and GradScaler by hand; accel and Accelerate: mixed_precision=",
            ))  # fmt: skip
        results.append(Measurement(f"gpu {label} steps/s", "gpu", "steps/s", True, samples=rates))
        peaks = {c: [a["max_memory_mb"] for a in answers[f"{c}:{precision}"]] for c in options.contenders}
        results.append(
            Measurement(f"gpu {label} max memory allocated", "gpu memory", "MB", False, samples=peaks)
        )
    return results
