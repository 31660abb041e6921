"""The program of a job whose launch hook starts its replicas itself (XLA's): run the script on
every replica.

Usage (by torchrun_args.build_replica_call only):
`python -u -m accel_launch.launch._replica_worker LAUNCHER_PID N [-m] SCRIPT [ARGS...]`, with
ACCEL_DISTRIBUTED_TYPE naming the job's type.

It ties itself to the launcher (a SIGKILLed launcher takes it along, as it does torchrun's workers),
then hands `run_script` to the `start_replicas` of the job's launch hook (XLA's: `torch_xla.launch`),
which calls it once per replica (XLA: in this process for one replica; on its CPU device as
threads, on a TPU host in one process per chip). Each replica runs the script as
`python SCRIPT ARGS` would (`__name__` is "__main__", `sys.argv` is `[SCRIPT, *ARGS]`, the
script's folder first on `sys.path`).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

_USAGE = (
    "usage: python -m accel_launch.launch._replica_worker LAUNCHER_PID NUM_PROCESSES [-m] SCRIPT [ARGS...]"
)


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
    from accel_launch.launch._worker_exec import tie_to_parent

    launcher_pid, num_processes, module, script, script_args = parse(sys.argv[1:])
    try:
        if not tie_to_parent(launcher_pid):
            os._exit(128 + signal.SIGKILL)  # the launcher died while this job started
    except OSError as error:
        sys.stderr.write(f"accel launch: this job may outlive a killed launcher ({error})\n")
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    # run_script under the module's own name, not __main__'s: replicas spawned elsewhere unpickle it.
    from accel_launch.launch._replica_worker import run_script as replica
    from accel_state.environment import env_vars
    from accel_state.seam.launch_hook import hook_for_type

    hook = hook_for_type(os.environ.get(env_vars.DISTRIBUTED_TYPE))
    if hook.start_replicas is None:
        raise SystemExit(f"accel launch: the {hook.title} launch hook does not start replicas itself")
    hook.start_replicas(replica, (script, script_args, module), num_processes=num_processes)


if __name__ == "__main__":
    main()
