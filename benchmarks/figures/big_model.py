"""Big-model inference with CPU and disk offload: load time, forward time and peak memory, against the
full model loaded in memory.

The model of accel-big-modeling's memory-budget scenario: BLOCKS blocks of Linear WIDTH x WIDTH
(192 MiB of fp32 weights), saved once as SHARDS safetensors shards with an index (its files then
sit in the page cache for every contender alike). Every contender, every round, is a fresh process
(`workers/big_model_job.py`), in an order rotating from round to round: raw builds the model in
memory and copies each shard in with `load_state_dict` (everything resident: the baseline); accel
and Accelerate build it on the meta device and `load_checkpoint_and_dispatch` it with
`device_map="auto"` and a CPU budget of a quarter of the model, the rest offloaded to disk. Each then
runs forwards of a batch of 4 rows. Memory is the peak growth above the process's start during the
load and the first forward: RssAnon (anonymous memory: what the kernel cannot reclaim) and VmRSS
(all resident pages, memory-mapped weights included). Target: accel's anonymous growth at most
0.6x the model's size.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import ACCEL, Measurement, RunOptions

MB = 2**20
FULL = {"blocks": 48, "width": 1024, "shards": 8}  # 48 * (1024 * 1024 + 1024) * 4 bytes = 192 MiB
QUICK = {"blocks": 8, "width": 256, "shards": 2}
BUDGET_SHARE = 4  # the CPU budget is the model's size / 4 (48 MiB of the 192 MiB model)
FIGURES = {
    "load_s": ("load", "s"),
    "forward_s": ("forward of a batch", "s"),
    "anon_mb": ("peak anonymous memory growth", "MiB"),
    "rss_mb": ("peak resident memory growth", "MiB"),
}


def measure(options: RunOptions) -> list[Measurement]:
    """Return load seconds, forward seconds and peak memory growth (x = model bytes)."""
    model = QUICK if options.quick else FULL
    shape = [f"--{name}={value}" for name, value in model.items()]
    root = Path(tempfile.mkdtemp(prefix="accel-bench-big-model-"))
    samples: dict[str, dict[str, list[float]]] = {key: {} for key in FIGURES}
    try:
        model_bytes = run_job(ACCEL, "big_model_job.py", ["prepare", str(root), *shape])["bytes"]
        budget = model_bytes // BUDGET_SHARE
        for round_index in range(1 if options.quick else options.rounds):
            for contender in round_order(options.contenders, round_index):
                answer = run_job(
                    contender,
                    "big_model_job.py",
                    ["measure", contender, str(root), *shape, f"--cpu_budget={budget}"],
                )
                if not answer["equal"]:
                    raise RuntimeError(f"big_model_job: {contender}'s output differs from the full model's")
                for key in FIGURES:
                    samples[key].setdefault(contender, []).append(answer[key])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    size = f"{model_bytes / MB:.0f} MiB"
    note = (
        f"{model['blocks']} x Linear {model['width']} fp32 in {model['shards']} safetensors shards; raw: "
        f"built in memory + load_state_dict; accel, accelerate: load_checkpoint_and_dispatch, "
        f"device_map='auto', max_memory cpu {budget / MB:.0f} MiB, rest on disk; batch of 4 rows"
    )
    targets = {"anon_mb": f"accel<={0.6 * model_bytes / MB:.1f}"}
    return [
        Measurement(
            figure=f"big model {title}, {size}",
            group=f"big_model_{'time' if unit == 's' else 'memory'}",
            unit=unit,
            higher_is_better=False,
            samples=samples[key],
            x=float(model_bytes),
            x_label="model bytes",
            note=note,
            target=targets.get(key),
            series=title,
        )
        for key, (title, unit) in FIGURES.items()
    ]
