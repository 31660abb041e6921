"""One contender's collectives on every rank: seconds per call of each op at each size.

    <launcher> collectives_job.py CONTENDER --sizes 1024,65536 --blocks 3 --block-seconds 0.05

Ops, per rank a float32 tensor of the given bytes (pad: rank r holds r elements fewer, so the
others pad it):
- raw: `all_gather_into_tensor` into a fresh output (the figure compares gather and
  gather_for_metrics with it), and for pad a hand-written pad (one all_gather of this rank's
  length, then `new_full` and a copy);
- accel / accelerate: `accelerator.gather`, `accelerator.pad_across_processes`, and
  `accelerator.gather_for_metrics` while a prepared loader is being iterated (its usual place:
  an evaluation loop, not at the end of the data);
- accel and accelerate also time the raw ops in their own job ("raw/gather", ...): a ratio
  measured within one job, which load from other work on the machine cannot skew;
- accel also with its input check off (`ACCEL_CHECK_COLLECTIVES=0`), in the same job, ops
  "gather/nocheck" and "gather_for_metrics/nocheck", and `gather` in debug mode
  (`ACCEL_DEBUG_MODE=1`: the header plus a full comparison of the inputs' descriptions), op
  "gather/debug";
- accel, with `--own-blocks N`, also what its own code adds to a call with the check off: the same
  ops and the raw gather, in N more blocks, with the time spent inside the transport's all_gather
  taken off each side (`_TransportClock`), ops "own/gather" and "own/gather_for_metrics" (seconds
  per call beyond the raw gather's, the median block). Between two processes the transport's time
  varies by more than a 5% target can be judged by; what each side runs around it can be counted.
  It is counted as it runs, between real exchanges: the same code run in a loop of its own, with a
  local copy for a transport, took a fifth of that time (its caches stay warm).

Every (op, size) runs in `--blocks` timed blocks, the ops in a new order each block round, the same
on every rank (a rotation kept each op after the same neighbour in every block, so whatever that
neighbour left behind, its buffers or the allocator's state, weighed on it in all of them). A
block's calls start and end with a barrier, and fill about `--block-seconds`, reckoned from the
fastest of each op's next few calls at that size (`_seconds_per_call`). Rank 0 emits {op: {bytes:
seconds per call}}, from each op's fastest block (slower ones measure interference from other work
on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.jobs import emit
from benchmarks.workers.job_exit import end_job

Op = Callable[[torch.Tensor], Any]
OWN_OPS = ("gather", "gather_for_metrics")  # accel's, counted around the transport against the raw gather
_OPEN_LOADERS: list[Any] = []  # loaders being iterated while the job measures


def _timed_block(call: Callable[[], object], calls: int, barrier: Callable[[], None]) -> float:
    """Return the seconds per call of `calls` calls, started together on every rank."""
    barrier()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    barrier()
    return (time.perf_counter() - started) / calls


def _raw_ops() -> dict[str, Op]:
    dist.init_process_group("gloo")
    return _raw_functions()


class _TransportClock:
    """The all_gather every gather of both sides goes through, and the seconds spent inside it."""

    def __init__(self) -> None:
        self.inside = 0.0
        self.all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def __call__(self, out: torch.Tensor, tensor: torch.Tensor, async_op: bool = False) -> Any:
        started = time.perf_counter()
        done = self.all_gather(out, tensor, async_op=async_op)
        if done is not None:  # in flight: it ends when waited for
            done.wait()
        self.inside += time.perf_counter() - started
        return done


def _raw_functions(all_gather: Callable[..., Any] | None = None) -> dict[str, Op]:
    world = dist.get_world_size()
    # all_gather_into_tensor's new name in recent torch (the old one warns through a wrapper).
    all_gather = all_gather or getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        out = torch.empty((tensor.shape[0] * world, *tensor.shape[1:]), dtype=tensor.dtype)
        all_gather(out, tensor)
        return out

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        length = torch.tensor([tensor.shape[0]], dtype=torch.int64)
        lengths = torch.empty(world, dtype=torch.int64)
        all_gather(lengths, length)
        longest = int(lengths.max())
        if longest == tensor.shape[0]:
            return tensor
        out = tensor.new_full((longest, *tensor.shape[1:]), 0)
        out[: tensor.shape[0]] = tensor
        return out

    # gather_for_metrics' raw equivalent is the same all_gather: the figure reuses "gather".
    return {"gather": gather, "pad_across_processes": pad}


def _in_evaluation(accelerator: Any) -> None:
    """Start iterating a prepared loader and leave it open, as an evaluation loop would."""
    from torch.utils.data import DataLoader, TensorDataset

    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(4096)), batch_size=1))
    iterator = iter(loader)
    next(iterator)
    _OPEN_LOADERS.append((loader, iterator))


def _library_ops(accelerator: Any) -> dict[str, Op]:
    _in_evaluation(accelerator)
    ops = {
        "gather": accelerator.gather,
        "pad_across_processes": accelerator.pad_across_processes,
        "gather_for_metrics": accelerator.gather_for_metrics,
    }
    # The raw ops again, in the same blocks: a ratio that load from other jobs cannot skew.
    ops.update({f"raw/{name}": op for name, op in _raw_functions().items()})
    return ops


def _accel_ops() -> dict[str, Op]:
    from accel import Accelerator
    from accel_state import PartialState

    ops = _library_ops(Accelerator())
    state = PartialState()

    def switched(op: Op, check: bool, debug: bool) -> Op:
        def call(tensor: torch.Tensor) -> Any:
            # What ACCEL_CHECK_COLLECTIVES=0 or ACCEL_DEBUG_MODE=1 sets, flipped alike on every rank.
            defaults = state.check_collectives, state.debug
            state.check_collectives, state.debug = check, debug
            try:
                return op(tensor)
            finally:
                state.check_collectives, state.debug = defaults

        return call

    ops["gather/nocheck"] = switched(ops["gather"], check=False, debug=False)
    ops["gather_for_metrics/nocheck"] = switched(ops["gather_for_metrics"], check=False, debug=False)
    ops["gather/debug"] = switched(ops["gather"], check=True, debug=True)
    return ops


def _outside(op: Op, tensor: torch.Tensor, calls: int, clock: _TransportClock) -> float:
    """Return the seconds per call `op` spends outside the transport over `calls` calls, started
    together on every rank (the closing barrier not counted)."""
    dist.barrier()
    clock.inside = 0.0
    started = time.perf_counter()
    for _ in range(calls):
        op(tensor)
    seconds = time.perf_counter() - started
    dist.barrier()
    return (seconds - clock.inside) / calls


@contextlib.contextmanager
def _transport_clocked(clock: _TransportClock) -> Iterator[None]:
    """accel's collectives with the check off and their all_gather timed by `clock`, while inside."""
    from accel_state import PartialState
    from accel_state.seam import communication

    state, transport = PartialState(), communication._all_gather_single
    defaults = state.check_collectives, state.debug
    state.check_collectives, state.debug = False, False
    communication._all_gather_single = clock
    try:
        yield
    finally:
        communication._all_gather_single = transport
        state.check_collectives, state.debug = defaults


def _own_work(
    ops: dict[str, Op], sizes: list[int], blocks: int, block_seconds: float
) -> dict[str, dict[int, float]]:
    """Return {"own/<op>": {size: seconds per call}} that accel's gather and gather_for_metrics (check
    off) spend outside the transport beyond what the raw gather does, the median of `blocks` blocks."""
    clock = _TransportClock()
    clocked = {"raw": _raw_functions(clock)["gather"], **{op: ops[op] for op in OWN_OPS}}
    own: dict[str, dict[int, float]] = {f"own/{op}": {} for op in OWN_OPS}
    outside = functools.partial(_outside, clock=clock)
    with _transport_clocked(clock):
        for size in sizes:
            per_block = _blocks(clocked, size, blocks, block_seconds, outside)
            for op in OWN_OPS:
                own[f"own/{op}"][size] = statistics.median(per_block[op]) - statistics.median(
                    per_block["raw"]
                )
    return own


def _accelerate_ops() -> dict[str, Op]:
    from accelerate import Accelerator

    return _library_ops(Accelerator())


def _inputs(size: int, op: str) -> torch.Tensor:
    elements = max(1, size // 4)
    if "pad" in op:  # also the raw pad timed in a library job
        elements -= dist.get_rank()
    return torch.full((elements,), float(dist.get_rank()))


def _seconds_per_call(op: Op, tensor: torch.Tensor, block_seconds: float) -> float:
    """Return the fastest of up to 3 single calls after a first one, the slowest rank's each time.

    The first call makes the op's buffers at this size and, for a checked op, teaches its history
    the size; one call's time can also hold a stall of the transport. Either made blocks of one to
    seven calls where thirty were meant. The same on every rank: each time is agreed before the next.
    """
    call = functools.partial(op, tensor)
    _timed_block(call, 1, dist.barrier)
    spent, fastest = 0.0, float("inf")
    for _ in range(3):
        agreed = torch.tensor([_timed_block(call, 1, dist.barrier)], dtype=torch.float64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        fastest, spent = min(fastest, float(agreed)), spent + float(agreed)
        if spent > block_seconds:
            break
    return fastest


def _calls(block_seconds: float, seconds_per_call: float) -> int:
    return max(1, min(2000, round(block_seconds / max(seconds_per_call, 1e-6))))


def _blocks(
    ops: dict[str, Op],
    size: int,
    blocks: int,
    block_seconds: float,
    timed: Callable[[Op, torch.Tensor, int], float],
) -> dict[str, list[float]]:
    """Return each op's `timed(op, input, calls)` at `size` in each of `blocks` blocks, the ops in a new
    order each block (the same on every rank), a block's calls filling about `block_seconds`."""
    inputs = {name: _inputs(size, name) for name in ops}
    calls = {}
    for name, op in ops.items():  # warm-up, and how many calls fill a block (the same on every rank)
        calls[name] = _calls(block_seconds, _seconds_per_call(op, inputs[name], block_seconds))
    times: dict[str, list[float]] = {name: [] for name in ops}
    for block in range(blocks):
        order = list(ops)
        random.Random(block).shuffle(order)  # seeded: the same order on every rank
        for name in order:
            times[name].append(timed(ops[name], inputs[name], calls[name]))
    return times


def _per_call(op: Op, tensor: torch.Tensor, calls: int) -> float:
    return _timed_block(functools.partial(op, tensor), calls, dist.barrier)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=("raw", "accel", "accelerate"))
    parser.add_argument("--sizes", required=True, help="bytes per rank, comma-separated")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--block-seconds", type=float, default=0.03)
    parser.add_argument("--own-blocks", type=int, default=0, help="accel: blocks of its own work (0: none)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    build = {"raw": _raw_ops, "accel": _accel_ops, "accelerate": _accelerate_ops}[args.contender]
    ops = build()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[int, float]] = {name: {} for name in ops}
    for size in sizes:
        for name, seconds in _blocks(ops, size, args.blocks, args.block_seconds, _per_call).items():
            # The fastest block: on a shared machine, slower ones measure other work's interference.
            results[name][size] = min(seconds)
    if args.own_blocks and args.contender == "accel":
        results.update(_own_work(ops, sizes, args.own_blocks, args.block_seconds))
    if dist.get_rank() == 0:
        emit(results)
    dist.barrier()
    end_job(args.contender)


if __name__ == "__main__":
    main()
