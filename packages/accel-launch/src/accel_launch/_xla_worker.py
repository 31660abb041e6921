"""The program of an XLA job of `accel launch`: run the script on every XLA replica.

Usage (by xla_launch only): `python -u -m accel_launch._xla_worker LAUNCHER_PID N [-m] SCRIPT [ARGS...]`.

It ties itself to the launcher (a SIGKILLed launcher takes it along, as it does torchrun's workers),
then hands `run_script` to the XLA backend's `launch` (`torch_xla.launch`), which calls it once per
replica: in this process for one replica; on XLA's CPU device as threads, on a TPU host in one
process per chip. Each replica runs the script as `python SCRIPT ARGS` would (`__name__` is
"__main__", `sys.argv` is `[SCRIPT, *ARGS]`, the script's folder first on `sys.path`).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

_USAGE = "usage: python -m accel_launch._xla_worker LAUNCHER_PID NUM_PROCESSES [-m] SCRIPT [ARGS...]"


def run_script(script: str, script_args: list[str], module: bool) -> None:
    """Run `script` (a module name when `module`) with `script_args` as the program `__main__`."""
    sys.argv = [script, *script_args]  # the same on every replica: threads share it
    if module:
        runpy.run_module(script, run_name="__main__", alter_sys=False)
    else:
        runpy.run_path(script, run_name="__main__")


def parse(argv: list[str]) -> tuple[int, int, bool, str, list[str]]:
    """Return (launcher pid, replicas, module, script, script args) from the worker's arguments."""
    if len(argv) < 3 or not argv[0].isdigit() or not argv[1].isdigit() or int(argv[1]) < 1:
        raise SystemExit(_USAGE)
    module = argv[2] == "-m"
    rest = argv[3:] if module else argv[2:]
    if not rest:
        raise SystemExit(_USAGE)
    return int(argv[0]), int(argv[1]), module, rest[0], rest[1:]


def main() -> None:
    from accel_launch._worker_exec import tie_to_parent

    launcher_pid, num_processes, module, script, script_args = parse(sys.argv[1:])
    try:
        if not tie_to_parent(launcher_pid):
            os._exit(128 + signal.SIGKILL)  # the launcher died while this job started
    except OSError as error:
        sys.stderr.write(f"accel launch: this job may outlive a killed launcher ({error})\n")
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    # run_script under the module's own name, not __main__'s: the replicas a TPU host spawns unpickle it.
    from accel_launch._xla_worker import run_script as replica
    from accel_state.environment.distributed_type import DistributedType
    from accel_state.seam.backend import replica_launcher

    launch = replica_launcher(DistributedType.XLA)
    launch(replica, (script, script_args, module), num_processes=num_processes)


if __name__ == "__main__":
    main()
