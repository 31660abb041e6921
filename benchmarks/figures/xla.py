"""The basic training loop on XLA's CPU device (PJRT_DEVICE=CPU, one device): through accel vs written
by hand with torch_xla (raw), an MLP of 3 x Linear 256, batch 64, SGD (`workers/xla_loop.py`).

Steps/s (target: accel >= 0.95x raw), and XLA's graph counts, which must not exceed the hand loop's:
graphs compiled in all (a count that grows from round to round is a recompilation) and graphs run
per step once warm. Each loop is one job, a fresh process (XLA caches compiled graphs per process),
warmed up in each of `blockjobs.STARTS` starts; blocks of an epoch alternate between the jobs round by
round.

torch_xla loads only into the torch release it was built for (2.9.0), so this figure runs in its
own environment (`nox -s "bench_engines(backend='xla')"`); elsewhere it is listed as skipped, with why.
"""

from __future__ import annotations

import sys

from benchmarks import blockjobs, launchers, probe
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

FIGURE = "train MLP 3x256 on XLA's CPU device"
ENV = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"}
STEPS, QUICK_STEPS = 400, 4
NOTE = (
    "1 process, XLA's CPU device; raw: torch_xla's recipe (MpDeviceLoader, xm.optimizer_step); accel: "
    "Accelerator().prepare; one sample per round is an epoch of {steps} steps, until the device is done"
)


def missing() -> str | None:
    """Return None when torch_xla and accel's XLA adapter import here, else why not."""
    return probe.missing_module("torch_xla", **ENV) or probe.missing_module("accel_xla", **ENV)


def measure(options: RunOptions) -> list[Measurement]:
    """Return steps/s, graphs compiled and graphs per step of the hand loop and accel's."""
    why = missing()
    if why:
        return [Measurement(FIGURE, "xla", "steps/s", True, target=f"{ACCEL}/{RAW}>=0.95", skipped=why)]
    steps = QUICK_STEPS if options.quick else STEPS
    specs = {}
    for contender in (RAW, ACCEL):
        command = [sys.executable, launchers.worker("xla_loop.py"), "--contender", contender]
        specs[contender] = blockjobs.JobSpec([*command, "--steps", str(steps)], launchers.child_env(**ENV), 1)
    # One warm-up epoch in each start, even in a quick run: it compiles every graph, so the counts compare.
    answers = blockjobs.interleaved_in_starts(specs, ["xla"], options.rounds, warmup=1)["xla"]
    note = NOTE.format(steps=steps)

    def values(key: str) -> dict[str, list[float]]:
        return {contender: [answer[key] for answer in answers[contender]] for contender in specs}

    return [
        Measurement(FIGURE, "xla", "steps/s", True, samples=values("rate"), target=f"{ACCEL}/{RAW}>=0.95",
                    note=note),
        Measurement("XLA graphs compiled, in all", "xla graphs", "graphs", False,
                    samples=values("graphs_compiled"), target=f"{ACCEL}/{RAW}<=1", note=note),
        Measurement("XLA graphs run per step, warm", "xla graphs", "graphs per step", False,
                    samples=values("graphs_per_step"), target=f"{ACCEL}/{RAW}<=1", note=note),
    ]  # fmt: skip
