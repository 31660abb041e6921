"""Training steps/s through accel vs a hand-written DDP loop under torchrun, in the same run.

Both run the same MLP (3 Linear layers of width 512, batch 64, one thread per process) on 2 CPU
processes; runs alternate so that drift in the machine's speed hits both alike. Prints the ratio
of medians (target: >= 0.99).

    python benchmarks/overhead.py [--rounds 7] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("_training_loop.py")


def run_once(mode: str, processes: int, steps: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ACCEL_DEBUG_MODE", None)
    if mode == "raw":
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                    "--master_addr", "127.0.0.1", "--master_port", "0", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "127.0.0.1:0"]  # fmt: skip
    else:
        launcher = [
            sys.executable,
            "-m",
            "accel_launch.cli",
            "launch",
            "--cpu",
            "--num_processes",
            str(processes),
        ]
    command = [*launcher, str(WORKER), mode, "--steps", str(steps)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        sys.exit(f"benchmark: the {mode} run failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    raw, accel = [], []
    for round_index in range(args.rounds):
        raw.append(run_once("raw", args.processes, args.steps))
        accel.append(run_once("accel", args.processes, args.steps))
        print(
            f"round {round_index + 1}: raw DDP {raw[-1]:.2f} steps/s, accel {accel[-1]:.2f} steps/s",
            flush=True,
        )
    raw_median, accel_median = statistics.median(raw), statistics.median(accel)
    print(f"raw DDP (torchrun): {raw_median:.2f} steps/s (median of {args.rounds})")
    print(f"accel (accel launch): {accel_median:.2f} steps/s (median of {args.rounds})")
    print(f"ratio accel/raw: {accel_median / raw_median:.3f} (target >= 0.99)")


if __name__ == "__main__":
    main()
