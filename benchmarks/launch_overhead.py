"""How much `accel launch` adds over torchrun, and how fast `accel --help` answers.

Runs the same 2-process CPU job (a script that builds `accel.Accelerator()`) under
`accel launch --cpu --num_processes 2` and under `python -m torch.distributed.run --nproc_per_node 2`,
alternating the two over several rounds, and prints the median wall times and their ratio
(target: <= 1.05), then the median of 10 `accel --help` runs (target: < 0.2 s).

    python benchmarks/launch_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accel_launch.ports import find_free_port

JOB = "from accel import Accelerator\n\naccelerator = Accelerator()\naccelerator.wait_for_everyone()\n"


def _timed(command: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "job.py")
        script.write_text(JOB)
        accel_times, torchrun_times = [], []
        for _ in range(rounds):
            accel = [sys.executable, "-m", "accel_launch.cli", "launch", "--cpu", "--num_processes", "2"]
            accel_times.append(_timed([*accel, str(script)]))
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
            rendezvous = ["--master_addr", "127.0.0.1", "--master_port", str(find_free_port())]
            torchrun_times.append(_timed([*torchrun, *rendezvous, str(script)]))
    help_times = [_timed([sys.executable, "-m", "accel_launch.cli", "--help"]) for _ in range(10)]
    accel_median, torchrun_median = statistics.median(accel_times), statistics.median(torchrun_times)
    print(f"accel launch    median of {rounds}: {accel_median:.3f} s")
    print(f"torchrun        median of {rounds}: {torchrun_median:.3f} s")
    print(f"ratio accel/torchrun: {accel_median / torchrun_median:.3f} (target <= 1.05)")
    print(f"accel --help    median of 10: {statistics.median(help_times):.3f} s (target < 0.2)")


if __name__ == "__main__":
    main()
