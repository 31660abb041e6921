"""Cost of checking a collective's inputs across ranks, against a raw torch.distributed all_gather.

Launches itself on 2 CPU processes (`accel launch --cpu --num_processes 2`: gloo, one thread per
process) and times, per call, a 1 KB and a 64 MB float32 gather four ways, in the same job:

- raw: `torch.distributed` all_gather into a fresh output tensor, unchecked;
- accel, check off: `gather` with `ACCEL_CHECK_COLLECTIVES=0` (the wrapper alone);
- accel, checked: `gather` as it runs by default (its inputs checked through a header exchange);
- accel, debug: `gather` in debug mode (the header plus a full comparison of pickled descriptions).

The four alternate within each round, in a rotating order, so that drift in the machine's speed
hits all alike. Prints the median time per call and the median over rounds of each round's ratio
to raw. A gather of at most 1 KB per rank travels inside the header exchange, so checking it costs
no extra round trip; a larger one costs one header all_gather (1280 bytes per rank) on top.

    python benchmarks/collectives.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

SIZES = {"1 KB": (256, 1000), "64 MB": (16 * 2**20, 4)}  # float32 elements, calls per timed block
MODES = ("raw", "check off", "checked", "debug")


def _timed_block(call: Callable[[], object], calls: int, barrier: Callable[[], None]) -> float:
    """Return the seconds per call of `calls` calls, started together on every rank."""
    barrier()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    barrier()
    return (time.perf_counter() - started) / calls


def worker(rounds: int) -> None:
    """Run on every rank under `accel launch`; rank 0 prints one JSON line of per-call seconds."""
    import torch
    import torch.distributed as dist

    from accel_state import PartialState, gather

    state = PartialState()
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    world = state.num_processes

    def raw(tensor: torch.Tensor) -> torch.Tensor:
        out = torch.empty((tensor.shape[0] * world,), dtype=tensor.dtype)
        all_gather(out, tensor)
        return out

    def accel(check: bool, debug: bool) -> Callable[[torch.Tensor], object]:
        def call(tensor: torch.Tensor) -> object:
            # The switches ACCEL_CHECK_COLLECTIVES and ACCEL_DEBUG_MODE set, flipped alike on every rank.
            state.check_collectives, state.debug = check, debug
            return gather(tensor)

        return call

    functions = {
        "raw": raw,
        "check off": accel(False, False),
        "checked": accel(True, False),
        "debug": accel(True, True),
    }
    results: dict[str, dict[str, list[float]]] = {size: {mode: [] for mode in MODES} for size in SIZES}
    for size, (elements, calls) in SIZES.items():
        tensor = torch.full((elements,), float(state.process_index))
        for mode in MODES:  # warm-up, and a check that every way gathers the same
            assert torch.equal(functions[mode](tensor), raw(tensor)), mode
        for round_index in range(rounds):
            order = MODES[round_index % len(MODES) :] + MODES[: round_index % len(MODES)]
            for mode in order:
                seconds = _timed_block(
                    functools.partial(functions[mode], tensor), calls, state.wait_for_everyone
                )
                results[size][mode].append(seconds)
    if state.is_main_process:
        print(json.dumps(results), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ACCEL_DEBUG_MODE", None)
    env.pop("ACCEL_CHECK_COLLECTIVES", None)
    command = [
        sys.executable, "-m", "accel_launch.cli", "launch", "--cpu", "--num_processes", "2",
        __file__, "--worker", "--rounds", str(args.rounds),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    if result.returncode != 0:
        sys.exit(f"benchmark: the job failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1]
    results = json.loads(line)
    for size, per_mode in results.items():
        raw = per_mode["raw"]
        print(f"{size} gather on 2 ranks, {args.rounds} rounds (medians):")
        for mode in MODES:
            times = per_mode[mode]
            # Ratios within a round: its modes ran back to back, so drift between rounds cancels.
            ratio = statistics.median(t / r for t, r in zip(times, raw, strict=True))
            print(
                f"  {mode:<10} {statistics.median(times) * 1e6:10.1f} us per call   ratio to raw {ratio:6.3f}"
            )
        check = [c - o for c, o in zip(per_mode["checked"], per_mode["check off"], strict=True)]
        print(
            f"  cost of the default check: {statistics.median(check) * 1e6:+.1f} us per call "
            f"({statistics.median(c / r for c, r in zip(check, raw, strict=True)):+.1%} of raw)"
        )


if __name__ == "__main__":
    main()
