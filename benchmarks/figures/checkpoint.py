"""`save_state`/`load_state` of a model + AdamW vs raw `torch.save`/`torch.load` of the same state.

Models of 10, 100 and 400 MB of float32 weights (AdamW adds twice that); one process, one thread.
Each size is one fresh process (`workers/checkpoint_job.py`) holding one model and optimizer,
prepared by accel and by Accelerate alike, that runs every round: every contender saves, then
loads what it saved (at 10 MB nine times, a round's figure being the median of the nine: one call
of a few milliseconds varies by +-20% here), the order rotating from round to round. Every save
writes a new folder, and `os.sync` runs (untimed) before every timed call: see
`benchmarks.workers.folders` for why both matter. Targets: save <= 1.0x raw; load <= 1.1x raw (a
load hashes every file before it changes anything, which a raw torch.load does not).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks.jobs import run_job
from benchmarks.measurement import ACCEL, Measurement, RunOptions

MEGABYTES = (10, 100, 400)
# Save/load pairs per round, by model size: enough that a small size's round is not one call's luck.
REPEATS = {10: 9}
QUICK_MEGABYTES = (4,)
TARGETS = {"save": "accel/raw<=1.0", "load": "accel/raw<=1.1"}
NOTE = (
    "1 process; model + AdamW (3x the model's bytes in all); raw: torch.save/torch.load(weights_only=True) "
    "of both state dicts; accel, accelerate: save_state/load_state (safetensors weights, RNG states); "
    "a new folder per save, os.sync before each timed call; at 10 MB a round is the median of 9 calls"
)


def measure(options: RunOptions) -> list[Measurement]:
    """Return save and load seconds per model size (x = model bytes)."""
    sizes = QUICK_MEGABYTES if options.quick else MEGABYTES
    rounds = 1 if options.quick else options.rounds
    measurements: dict[str, list[Measurement]] = {"save": [], "load": []}
    for megabytes in sizes:
        root = Path(tempfile.mkdtemp(prefix="accel-bench-checkpoint-"))
        try:
            arguments = ["--contenders", ",".join(options.contenders), "--megabytes", str(megabytes)]
            repeats = str(REPEATS.get(megabytes, 1))
            answer = run_job(
                ACCEL,
                "checkpoint_job.py",
                [*arguments, "--rounds", str(rounds), "--repeats", repeats, "--dir", str(root)],
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        for operation, per_contender in measurements.items():
            per_contender.append(
                Measurement(
                    figure=f"{operation}_state {megabytes} MB",
                    group="checkpoint",
                    unit="s",
                    higher_is_better=False,
                    samples={contender: answer[operation][contender] for contender in options.contenders},
                    x=float(answer["bytes"]),
                    x_label="model bytes",
                    note=NOTE,
                    target=TARGETS[operation],
                    series=f"{operation}_state",
                )
            )
    return measurements["save"] + measurements["load"]
