"""`notebook_launcher`: run a function on N processes from a notebook or a plain Python session.

The workers are forked (they see the notebook's functions without pickling them) and watched by
torch's elastic agent, on a static rendezvous at 127.0.0.1 and a free port (its store listening on
loopback only when `master_addr` is a loopback address, the default). Each worker dies with this process.
The agent is the one `accel launch` runs (accel_launch.launch.supervisor): when a rank fails, the
live ranks are asked where they are first, and the diagnosis is printed and named by the error.

This module imports torch; `accel_launch` loads it only when one of its names is first used.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from accel_launch.rendezvous.ports import (
    LOCALHOST,
    LOOPBACK_RDZV_BACKEND,
    endpoint,
    find_free_port,
    is_loopback,
)
from accel_state.environment import env_vars
from accel_state.seam.launch_hook import LaunchHook

# Accelerate's choices; all of them mean the same on the one machine a notebook runs on.
RDZV_BACKENDS = ("static", "c10d")


class NotebookLaunchError(ChildFailedError, RuntimeError):
    """The function cannot be started on several processes here, or a rank failed; the message says which.

    A torch `ChildFailedError`, as Accelerate's notebook_launcher raises, so code catching that
    catches this; `failures` holds each failed rank's `ProcessFailure` (empty when nothing started).
    """

    def __init__(self, message: str, failures: dict[int, ProcessFailure] | None = None) -> None:
        # Not ChildFailedError.__init__: it requires failures and writes its own, longer message.
        Exception.__init__(self, message)
        self.name = "notebook_launcher"
        self.failures = dict(failures or {})


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: int | str | None = None,
    master_addr: str = LOCALHOST,
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    cpu: bool | None = None,
    rdzv_backend: str = "static",
) -> list[Any]:
    """Return `function(*args)` as computed on each process, ordered by rank.

    `num_processes` of 1 (or None on a machine without CUDA) calls `function` in this process.
    Otherwise N processes are forked, each with RANK/WORLD_SIZE/... and ACCEL_* env vars set like
    `accel launch` sets them (ACCEL_USE_CPU on a CPU-only run, ACCEL_MIXED_PRECISION).

    Under a distributed type whose launch hook starts its replicas itself (XLA: torch_xla installed
    and `PJRT_DEVICE` set, or a TPU present; not with `cpu=True`) the replicas run through that
    hook, forked: XLA runs one in this process, or `num_processes` on its CPU device
    (`CPU_NUM_DEVICES`), or one per chip on a TPU host.

    `rdzv_backend` ("static" or "c10d", as Accelerate takes) changes nothing: the workers all run on
    this machine, where the rendezvous described above is used whichever is named. A failed rank
    raises NotebookLaunchError, a torch `ChildFailedError`.
    """
    _check_arguments(num_processes, mixed_precision, use_port)
    if rdzv_backend not in RDZV_BACKENDS:
        raise NotebookLaunchError(
            f"rdzv_backend must be one of {', '.join(RDZV_BACKENDS)} (notebook_launcher runs on one "
            f"machine), got {rdzv_backend!r}"
        )
    from accel_launch.config.effective import hook_of_type
    from accel_state.environment.distributed_type import resolve_distributed_type

    hook = hook_of_type(resolve_distributed_type(cpu=bool(cpu)).value)
    if hook is not None and hook.stand_in and hook.install_hint:
        raise NotebookLaunchError(hook.install_hint)  # its adapter is not installed
    if hook is not None and hook.start_replicas is not None:
        return _launch_replicas(hook, function, args, num_processes or 1, mixed_precision)
    import torch

    cuda = torch.cuda.is_available() and not cpu
    use_cpu = not cuda if cpu is None else cpu
    if num_processes is None:
        num_processes = torch.cuda.device_count() if cuda else 1
    env = _worker_env(use_cpu, mixed_precision, num_processes)
    if num_processes == 1:
        with env_vars.patched(env):
            return [function(*args)]
    _check_fork_is_safe()
    return _launch(function, args, num_processes, env, master_addr, use_port, max_restarts, monitor_interval)


def _launch_replicas(
    hook: LaunchHook,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    num_processes: int,
    mixed_precision: str,
) -> list[Any]:
    """Return `function(*args)` of each replica, started by `hook` (XLA's: `torch_xla.launch`)."""
    from accel_state.seam.launch_hook import WorkerJob

    env = {
        env_vars.LAUNCHED: "1",
        env_vars.MIXED_PRECISION: mixed_precision,
        env_vars.DISTRIBUTED_TYPE: hook.distributed_types[0],
    }
    env.update(hook.env_for(WorkerJob(num_processes, cpu=False, settings={}, environ=dict(os.environ))))
    start = hook.start_replicas
    if start is None:
        raise NotebookLaunchError(f"the {hook.title} launch hook does not start replicas itself")
    if num_processes == 1:
        with env_vars.patched(env):
            return list(start(function, args, num_processes=1))
    _check_fork_is_safe()
    try:
        with env_vars.patched(env):
            return list(start(function, args, num_processes=num_processes, start_method="fork"))
    except Exception as error:
        raise NotebookLaunchError(
            f"a {hook.title} replica of {num_processes} failed: {type(error).__name__}: {_first_line(error)}"
        ) from error


def _check_arguments(num_processes: int | None, mixed_precision: str, use_port: int | str | None) -> None:
    """Raise NotebookLaunchError naming the first bad argument, before anything starts."""
    from accel_state.environment.choices import MIXED_PRECISION_CHOICES

    if num_processes is not None and num_processes < 1:
        raise NotebookLaunchError(f"num_processes must be at least 1, got {num_processes}")
    if mixed_precision not in MIXED_PRECISION_CHOICES:
        raise NotebookLaunchError(
            f"mixed_precision must be one of {', '.join(MIXED_PRECISION_CHOICES)}, got {mixed_precision!r}"
        )
    if use_port is not None and not (str(use_port).isdigit() and 1 <= int(use_port) <= 65535):
        raise NotebookLaunchError(f"use_port must be a port number in [1, 65535], got {use_port!r}")


def _worker_env(use_cpu: bool, mixed_precision: str, num_processes: int) -> dict[str, str]:
    env = {env_vars.LAUNCHED: "1", env_vars.MIXED_PRECISION: mixed_precision}
    if use_cpu:
        env[env_vars.USE_CPU] = "1"
    if num_processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _check_fork_is_safe() -> None:
    """Raise NotebookLaunchError naming why forking this process would break the workers."""
    if not sys.platform.startswith("linux"):
        raise NotebookLaunchError(
            f"notebook_launcher forks its workers, which is only safe on Linux (this is {sys.platform}); "
            "put the code in a script and use `accel launch`"
        )
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise NotebookLaunchError(
            "CUDA was already initialised in this process; forked workers cannot use it. Restart the "
            "notebook and call notebook_launcher before anything touches CUDA (moving a tensor or model "
            "to 'cuda', torch.cuda.device_count() is fine)"
        )
    from accel_state import PartialState

    if PartialState.current() is not None:
        raise NotebookLaunchError(
            "an Accelerator (or PartialState) was already created in this process; create it inside the "
            "function given to notebook_launcher instead"
        )


def _launch(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    num_processes: int,
    env: Mapping[str, str],
    master_addr: str,
    use_port: int | str | None,
    max_restarts: int,
    monitor_interval: float,
) -> list[Any]:
    from accel_launch.launch.runner import quiet_agent_logs
    from accel_launch.launch.supervisor import Supervisor, supervising

    quiet_agent_logs()
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from accel_launch.rendezvous import loopback as loopback_rendezvous

    loopback_rendezvous.register()
    port = int(use_port) if use_port is not None else find_free_port(master_addr)
    # torch's static rendezvous opens its store on every interface; on loopback ours listens there only.
    local = is_loopback(master_addr)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=num_processes,
        run_id=f"accel-notebook-{uuid.uuid4().hex[:8]}",
        rdzv_backend=LOOPBACK_RDZV_BACKEND if local else "static",
        rdzv_endpoint=endpoint(master_addr, port),
        rdzv_configs={} if local else {"rank": 0},
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method="fork",
    )
    worker_env = dict(env)
    supervisor = Supervisor.for_job(worker_env, None)
    supervisor.prefix = "notebook_launcher"
    try:
        with env_vars.patched(worker_env), supervising(supervisor):
            results = elastic_launch(config, _tied_function(function))(*args)
    except ChildFailedError as error:
        rank, failure = min(error.failures.items())
        # The finished agent's frames hold its store, whose server thread would live on in this
        # process (and in every worker forked by the next launch) for as long as the error is kept.
        traceback.clear_frames(error.__traceback__)
        diagnosis = f"\n{supervisor.summary}" if supervisor.summary else ""
        raise NotebookLaunchError(
            f"rank {rank} of {num_processes} failed (exit code {failure.exitcode}): "
            f"{_first_line(failure.message)}{diagnosis}",
            error.failures,
        ) from error
    finally:
        supervisor.close()
    return [results[rank] for rank in sorted(results)]


def _tied_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """Return `function` run through `_tied_to` this process, keeping its name (the agent reports it)."""
    return functools.wraps(function)(functools.partial(_tied_to, os.getpid(), function))


def _tied_to(parent_pid: int, function: Callable[..., Any], *args: Any) -> Any:
    """Call `function(*args)` in a forked worker that the kernel kills when this process dies (Linux).

    A notebook kernel that is killed (a restart) runs no handler that could stop the workers.
    """
    from accel_launch.launch._worker_exec import tie_to_parent

    if not tie_to_parent(parent_pid):
        os._exit(1)  # the notebook died while this worker was starting
    return function(*args)


def _first_line(message: Any) -> str:
    text = str(message or "").strip()
    return text.splitlines()[0] if text else "see the rank's output above"
