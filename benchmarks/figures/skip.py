"""`skip_first_batches(n)`, n = 10^2..10^5: time to the first batch after the skip (must stay flat in n).

One process, one thread, batches of 8 from a shuffled map-style dataset sized for the largest n.
accel and Accelerate skip on a loader each prepared; raw is `itertools.islice` over a plain
DataLoader, which loads every skipped batch (what resuming costs without an index to skip by).
Each round is one fresh process (`workers/skip_job.py`) running every contender at every n, the
contenders' order rotating from round to round. Flat: accel at 10^5 within 2x its time at 10^2.
"""

from __future__ import annotations

from benchmarks.jobs import run_job
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

SKIPS = (10**2, 10**3, 10**4, 10**5)
QUICK_SKIPS = (10**2, 10**3)
BATCH = 8
NOTES = {
    RAW: "raw: islice over a plain shuffled DataLoader (loads the skipped batches)",
    ACCEL: "accel/accelerate: accelerator.skip_first_batches on a prepared shuffled loader",
}


def measure(options: RunOptions) -> list[Measurement]:
    """Return one Measurement per n (x = n), in ms to the first batch after skipping n batches."""
    skips = QUICK_SKIPS if options.quick else SKIPS
    rounds = 1 if options.quick else options.rounds
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in skips} for name in options.contenders}
    arguments = ["--contenders", ",".join(options.contenders), "--skips", ",".join(map(str, skips))]
    for round_index in range(rounds):
        answer = run_job(
            ACCEL, "skip_job.py", [*arguments, "--batch", str(BATCH), "--round", str(round_index)]
        )
        for contender, per_n in answer.items():
            for n, seconds in per_n.items():
                samples[contender][int(n)].append(seconds * 1e3)
    return [
        Measurement(
            figure=f"skip_first_batches n={n:,}",
            group="skip",
            unit="ms to first batch",
            higher_is_better=False,
            samples={contender: samples[contender][n] for contender in options.contenders},
            x=float(n),
            x_label="batches skipped",
            note=f"batch {BATCH}, 1 process; {NOTES[RAW]}; {NOTES[ACCEL]}",
            series="skip_first_batches",
        )
        for n in skips
    ]
