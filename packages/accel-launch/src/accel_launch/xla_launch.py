"""XLA's part of a launch: the checks made before anything starts, the env vars of the job, and the
command that runs the script on every replica.

An XLA job is not started through torch's elastic agent: PyTorch/XLA's runtime, not the launcher,
knows the replicas (on a TPU host one per chip; on XLA's CPU device `CPU_NUM_DEVICES` of them, as
threads of one process). So the launcher starts one program, `accel_launch._xla_worker`, which
hands the script to the XLA backend's `launch` (`torch_xla.launch`). Neither torch nor torch_xla is
imported here: whether they are installed is asked of importlib, and whether a TPU is there of the
device files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accel_launch.config_schema import ConfigError
from accel_launch.launch_options import LaunchOptions, LaunchOptionsError
from accel_state.environment import env_vars
from accel_state.environment.distributed_type import tpu_present

XLA = "XLA"
# Printed wherever the user is: the paths are the repository's (`accel` on PyPI is another project).
# torch_xla 2.9.0 loads only into torch 2.9.0, whose PyPI wheel for Linux is the CUDA build.
INSTALL_HINT = (
    "XLA jobs need accel-xla and torch_xla, with torch 2.9.0 from PyTorch's CPU index; from the "
    "repository root: pip install --index-url https://download.pytorch.org/whl/cpu torch==2.9.0 && "
    "pip install -c constraints-xla.txt ./packages/accel-state ./packages/accel-data ./packages/accel-amp "
    "./packages/accel-launch './packages/accel[xla]' ./packages/accel-xla"
)
# The modules an XLA worker imports: the adapter and PyTorch/XLA itself.
REQUIRED_MODULES = ("accel_xla", "torch_xla")
# The program every XLA job starts (see its docstring).
WORKER_MODULE = "accel_launch._xla_worker"


@dataclass(frozen=True)
class XlaCall:
    """What to run for an XLA job: the worker's argv (interpreter first) and the env vars it must see."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def check_xla_installed() -> None:
    """Raise ConfigError (one line: how to install it) when the XLA adapter or torch_xla is missing."""
    if any(importlib.util.find_spec(name) is None for name in REQUIRED_MODULES):
        raise ConfigError(INSTALL_HINT)


def check_xla_options(
    options: LaunchOptions,
    environ: Mapping[str, str] | None = None,
    *,
    tpu: Callable[[], bool] = lambda: tpu_present(),
) -> None:
    """Raise LaunchOptionsError naming the first option an XLA job cannot honour."""
    environ = {**(os.environ if environ is None else environ), **options.env}
    if options.num_processes > 1 and _is_cpu_device(xla_device(environ, tpu=tpu)):
        _check_cpu_replicas(options.num_processes, environ)
    if options.num_machines > 1:
        raise LaunchOptionsError(
            f"--num_machines is {options.num_machines}, but accel launch runs XLA jobs on one machine "
            "(one TPU host, or XLA's CPU device)"
        )
    if options.max_restarts:
        raise LaunchOptionsError("--max_restarts is not supported for XLA jobs (torch_xla restarts nothing)")
    for flag, value in (("--log_dir", options.log_dir), ("--tee", options.tee)):
        if value is not None:
            raise LaunchOptionsError(
                f"{flag} is not supported for XLA jobs: the replicas write to the console"
            )


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
        raise LaunchOptionsError(
            f"--num_processes is {num_processes} but {env_vars.CPU_NUM_DEVICES} is {asked}: on XLA's CPU "
            "device they are the same replica count; set one of them"
        )
    raise LaunchOptionsError(
        f"--num_processes {num_processes} cannot run on XLA's CPU device: its replicas are threads of "
        "one process, which wait for each other until XLA's rendezvous times out when they compile the "
        "same collective graph at once (pytorch/xla#9089); run one replica (accel launch --xla without "
        f"--num_processes), or on a TPU; a script that staggers its replicas may set "
        f"{env_vars.CPU_NUM_DEVICES}={num_processes} to run anyway"
    )


def xla_device(environ: Mapping[str, str], *, tpu: Callable[[], bool] = tpu_present) -> str:
    """Return the XLA device a job runs on: `PJRT_DEVICE` as set, else TPU on a TPU machine, else CPU."""
    return environ.get(env_vars.PJRT_DEVICE, "").strip() or ("TPU" if tpu() else "CPU")


def xla_env(
    num_processes: int, environ: Mapping[str, str], *, tpu: Callable[[], bool] = tpu_present
) -> dict[str, str]:
    """Return the env vars that make `num_processes` replicas an XLA job.

    `PJRT_DEVICE` as `environ` sets it, else TPU on a TPU machine, else CPU (torch_xla's own
    default there, chosen here without its warning). On the CPU device `CPU_NUM_DEVICES` is the
    replica count; a TPU host runs one replica per chip when `num_processes` is above 1.
    """
    device = xla_device(environ, tpu=tpu)
    env = {env_vars.DISTRIBUTED_TYPE: XLA, env_vars.PJRT_DEVICE: device}
    if _is_cpu_device(device):
        env[env_vars.CPU_NUM_DEVICES] = str(num_processes)
    return env


def build_xla_call(
    options: LaunchOptions,
    script: str,
    script_args: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    tpu: Callable[[], bool] = tpu_present,
    launcher_pid: int | None = None,
) -> XlaCall:
    """Return the worker's argv and env for running `script script_args` as an XLA job under `options`.

    The env holds what `accel launch` gives every job (torchrun_args.worker_env, whose
    distributed type XLA wins), then the XLA variables, then `--env` pairs.
    """
    from accel_launch.torchrun_args import worker_env

    environ = os.environ if environ is None else environ
    env = worker_env(options, environ)
    env.update(xla_env(options.num_processes, {**environ, **options.env}, tpu=tpu))
    env.update(options.env)
    pid = os.getpid() if launcher_pid is None else launcher_pid
    argv = [sys.executable, "-u", "-m", WORKER_MODULE, str(pid), str(options.num_processes)]
    if options.module:
        argv.append("-m")
    argv.append(script)
    argv.extend(script_args)
    return XlaCall(argv=argv, env=env)
