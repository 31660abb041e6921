"""XLA's launch hook: `--xla`/`--tpu`, the checks made before anything starts, the env vars of the
job, and how its replicas start.

An XLA job is not started through torch's elastic agent: PyTorch/XLA's runtime, not the launcher,
knows the replicas (on a TPU host one per chip; on XLA's CPU device `CPU_NUM_DEVICES` of them, as
threads of one process). So the launcher starts one program, which hands the script to this
hook's `start_replicas` (`torch_xla.launch`, see accel_xla.launch.replicas). Neither torch nor torch_xla is
imported here: whether they are installed is asked of importlib, and whether a TPU is there of
the device files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from accel_state.backends.adapter_stand_ins import XLA, XLA_INSTALL_HINT
from accel_state.environment import env_vars
from accel_state.environment.distributed_type import tpu_present
from accel_state.seam.launch_hook import JobConfig, JobOptions, LaunchHookError, WorkerJob

INSTALL_HINT = XLA_INSTALL_HINT
# The modules an XLA worker imports: the adapter and PyTorch/XLA itself.
REQUIRED_MODULES = ("accel_xla", "torch_xla")


def check_xla_installed(config: JobConfig) -> None:
    """Raise LaunchHookError (one line: how to install it) when the XLA adapter or torch_xla is missing."""
    if any(importlib.util.find_spec(name) is None for name in REQUIRED_MODULES):
        raise LaunchHookError(INSTALL_HINT)


def check_xla_options(
    options: JobOptions,
    environ: Mapping[str, str],
    *,
    tpu: Callable[[], bool] | None = None,
) -> None:
    """Raise LaunchHookError naming the first option an XLA job cannot honour."""
    environ = {**environ, **options.env}
    if options.num_processes > 1 and _is_cpu_device(xla_device(environ, tpu=tpu)):
        _check_cpu_replicas(options.num_processes, environ)
    if options.num_machines > 1:
        raise LaunchHookError(
            f"--num_machines is {options.num_machines}, but accel launch runs XLA jobs on one machine "
            "(one TPU host, or XLA's CPU device)"
        )
    if options.max_restarts:
        raise LaunchHookError("--max_restarts is not supported for XLA jobs (torch_xla restarts nothing)")
    for flag, value in (("--log_dir", options.log_dir), ("--tee", options.tee)):
        if value is not None:
            raise LaunchHookError(f"{flag} is not supported for XLA jobs: the replicas write to the console")


def _is_cpu_device(device: str) -> bool:
    return device.upper().startswith("CPU")


def _check_cpu_replicas(num_processes: int, environ: Mapping[str, str]) -> None:
    """Refuse several replicas on XLA's CPU device unless the user set CPU_NUM_DEVICES to that count.

    There the replicas are threads of one process, and threads that compile the same new
    collective graph at the same moment wait for each other until XLA's rendezvous times out
    (pytorch/xla#9089, #5005): an ordinary script fails on every replica. A script that staggers
    its replicas before each new graph (as accel-xla's tests do) runs; setting CPU_NUM_DEVICES
    to the replica count says the script is one of those.
    """
    asked = environ.get(env_vars.CPU_NUM_DEVICES, "").strip()
    if asked == str(num_processes):
        return
    if asked:
        raise LaunchHookError(
            f"--num_processes is {num_processes} but {env_vars.CPU_NUM_DEVICES} is {asked}: on XLA's CPU "
            "device they are the same replica count; set one of them"
        )
    raise LaunchHookError(
        f"--num_processes {num_processes} cannot run on XLA's CPU device: its replicas are threads of "
        "one process, which wait for each other until XLA's rendezvous times out when they compile the "
        "same collective graph at once (pytorch/xla#9089); run one replica (accel launch --xla without "
        f"--num_processes), or on a TPU; a script that staggers its replicas may set "
        f"{env_vars.CPU_NUM_DEVICES}={num_processes} to run anyway"
    )


def xla_device(environ: Mapping[str, str], *, tpu: Callable[[], bool] | None = None) -> str:
    """Return the XLA device a job runs on: `PJRT_DEVICE` as set, else TPU on a TPU machine, else CPU."""
    # `tpu_present` is looked up when called, so that it can be replaced (tests pretend no TPU).
    on_tpu = tpu_present if tpu is None else tpu
    return environ.get(env_vars.PJRT_DEVICE, "").strip() or ("TPU" if on_tpu() else "CPU")


def xla_env(
    num_processes: int, environ: Mapping[str, str], *, tpu: Callable[[], bool] | None = None
) -> dict[str, str]:
    """Return the env vars that make `num_processes` replicas an XLA job.

    `PJRT_DEVICE` as `environ` sets it, else TPU on a TPU machine, else CPU (torch_xla's own
    default there, chosen here without its warning). On the CPU device `CPU_NUM_DEVICES` is the
    replica count; a TPU host runs one replica per chip when `num_processes` is above 1.
    """
    device = xla_device(environ, tpu=tpu)
    env = {env_vars.DISTRIBUTED_TYPE: XLA.distributed_types[0], env_vars.PJRT_DEVICE: device}
    if _is_cpu_device(device):
        env[env_vars.CPU_NUM_DEVICES] = str(num_processes)
    return env


def worker_env(job: WorkerJob) -> dict[str, str]:
    """Return the XLA variables of `job` (see xla_env), judged on what the workers would see."""
    return xla_env(job.num_processes, job.environ)


def start_replicas(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    *,
    num_processes: int = 1,
    start_method: str = "spawn",
) -> list[Any]:
    """Return `function(*args)` as each XLA replica computed it (`torch_xla.launch`, see
    accel_xla.launch.replicas)."""
    from accel_xla.launch.replicas import launch_replicas

    return launch_replicas(function, args, num_processes=num_processes, start_method=start_method)


HOOK = XLA._replace(
    check_launch=check_xla_installed,
    check_options=check_xla_options,
    worker_env=worker_env,
    start_replicas=start_replicas,
    stand_in=False,
)
