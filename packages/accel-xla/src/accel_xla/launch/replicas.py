"""Runs a function on every XLA replica through `torch_xla.launch`, for `accel launch --xla` and
`notebook_launcher`, and returns each replica's result.

One replica runs in this process (its result returned as it is). Several run as PyTorch/XLA starts
them: on XLA's CPU device as `CPU_NUM_DEVICES` threads of one child process, on a TPU host as one
child process per chip; their results come back pickled, through files in a temporary folder
(torch_xla.launch returns nothing).
The environment (`PJRT_DEVICE`, `CPU_NUM_DEVICES`) must be set before the runtime starts: the
launcher sets it.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

START_METHODS = ("spawn", "fork")


class _Replica:
    """`function(*args)` as torch_xla.launch calls it (replica index first), its result kept in a file."""

    def __init__(self, function: Callable[..., Any], folder: str) -> None:
        self.function = function
        self.folder = folder

    def __call__(self, index: int, *args: Any) -> None:
        import torch_xla.runtime as xr

        result = self.function(*args)
        path = Path(self.folder) / f"{int(xr.global_ordinal())}.pickle"
        path.write_bytes(pickle.dumps(result))


def launch_replicas(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    num_processes: int = 1,
    start_method: str = "spawn",
) -> list[Any]:
    """Return `function(*args)` as each replica computed it, ordered by replica.

    `num_processes` 1 runs one replica in this process; more run every replica the runtime is
    configured for. `start_method` "fork" lets children use functions they could not import
    (a notebook's); "spawn" is torch_xla's default.
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}, got {start_method!r}")
    import torch_xla

    if num_processes == 1:
        results: list[Any] = []

        def replica(index: int, *replica_args: Any) -> None:
            results.append(function(*replica_args))

        torch_xla.launch(replica, args=args, debug_single_process=True)  # here: nothing is pickled
        return results
    with tempfile.TemporaryDirectory(prefix="accel-xla-") as folder:
        torch_xla.launch(
            _Replica(function, folder),
            args=args,
            start_method=start_method,
        )
        # Files written by this process's own trusted replicas, read back once.
        files = sorted(Path(folder).glob("*.pickle"), key=lambda path: int(path.stem))
        return [pickle.loads(path.read_bytes()) for path in files]
