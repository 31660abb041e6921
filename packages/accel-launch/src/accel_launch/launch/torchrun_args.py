"""Turns LaunchOptions into the arguments of `torch.distributed.run` and the workers' env vars (or,
for a launch hook that starts its replicas itself, into the command of accel's replica program).

Kept free of side effects (the free port and the parent environment are passed in) so that what
the launcher would start can be checked without starting anything.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel_launch.config.effective import hook_of_type
from accel_launch.config.schema import PARALLELISM_DIMENSIONS
from accel_launch.launch.options import LaunchOptions
from accel_launch.rendezvous.ports import (
    LOCALHOST,
    LOOPBACK_RDZV_BACKEND,
    endpoint,
    find_free_port,
    is_loopback,
    loopback_interface,
)
from accel_state.environment import env_vars
from accel_state.environment.choices import DEFAULT_MASTER_PORT
from accel_state.seam.launch_hook import WorkerJob

# The first program of every worker (see its docstring): ties the worker to the launcher.
WORKER_EXEC = Path(__file__).with_name("_worker_exec.py")
# The program of a job whose launch hook starts its replicas itself (see its docstring).
REPLICA_WORKER = "accel_launch.launch._replica_worker"
# Env vars that choose the interface gloo and NCCL listen on; on one machine, loopback.
_SOCKET_INTERFACE_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class TorchrunCall:
    """What to hand to `torch.distributed.run`: its argv and the env vars every worker must see."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def build_torchrun_call(
    options: LaunchOptions,
    script: str,
    script_args: Sequence[str] = (),
    *,
    free_port: Callable[[], int] = find_free_port,
    environ: Mapping[str, str] | None = None,
) -> TorchrunCall:
    """Return the torchrun argv and worker env for running `script script_args` under `options`."""
    environ = os.environ if environ is None else environ
    return TorchrunCall(
        argv=torchrun_argv(options, script, script_args, free_port=free_port),
        env=worker_env(options, environ),
    )


def torchrun_argv(
    options: LaunchOptions,
    script: str,
    script_args: Sequence[str] = (),
    *,
    free_port: Callable[[], int] = find_free_port,
    launcher_pid: int | None = None,
) -> list[str]:
    """Return the argv for `torch.distributed.run`: the rendezvous, then the script untouched.

    One machine: the loopback rendezvous (its store listens on 127.0.0.1 only) on a free port.
    Several: torchrun's static or c10d rendezvous at `--main_process_ip`. On Linux each worker
    starts as `_worker_exec.py LAUNCHER_PID [-m] SCRIPT ARGS`, which ties it to `launcher_pid`
    (default: this process, where the runner runs the agent), then becomes `python [-m] SCRIPT ARGS`.
    """
    argv = [
        "--nnodes", str(options.num_machines),
        "--nproc_per_node", str(options.num_processes),
        "--max_restarts", str(options.max_restarts),
        "--monitor_interval", str(options.monitor_interval),
    ]  # fmt: skip
    argv += _rendezvous_argv(options, free_port)
    if options.log_dir is not None:
        argv += ["--log_dir", options.log_dir]
    if options.tee is not None:
        argv += ["--tee", options.tee]
    # The script marks the end of torchrun's flags: argparse's REMAINDER keeps what follows as is.
    if sys.platform.startswith("linux"):
        argv += [str(WORKER_EXEC), str(os.getpid() if launcher_pid is None else launcher_pid)]
        if options.module:
            argv.append("-m")
    elif options.module:
        argv.append("--module")  # no parent-death signal to set elsewhere: torchrun starts the script
    argv.append(script)
    argv.extend(script_args)
    return argv


def _rendezvous_argv(options: LaunchOptions, free_port: Callable[[], int]) -> list[str]:
    if not options.is_multi_machine:
        # One machine: static and c10d alike would open their store on every interface. Stay on
        # loopback (a main_process_ip that is not a loopback address means nothing here), and take a
        # free port so that concurrent jobs do not collide.
        given = options.main_process_ip
        host = given if given and is_loopback(given) else LOCALHOST
        port = options.main_process_port or free_port()
        return ["--rdzv_backend", LOOPBACK_RDZV_BACKEND, "--rdzv_endpoint", endpoint(host, port)]
    # validate() guarantees the address; every machine must agree on the port, so no guessing.
    master_addr = str(options.main_process_ip)
    master_port = options.main_process_port or DEFAULT_MASTER_PORT
    if options.rdzv_backend == "c10d":
        # c10d assigns node ranks at the rendezvous; machine 0 hosts the store at the endpoint.
        is_host = "1" if options.machine_rank == 0 else "0"
        return [
            "--rdzv_backend", "c10d",
            "--rdzv_endpoint", endpoint(master_addr, master_port),
            "--rdzv_conf", f"is_host={is_host}",
        ]  # fmt: skip
    return [
        "--node_rank", str(options.machine_rank),
        "--master_addr", master_addr,
        "--master_port", str(master_port),
        "--rdzv_backend", "static",
    ]  # fmt: skip


def worker_env(options: LaunchOptions, environ: Mapping[str, str]) -> dict[str, str]:
    """Return the env vars to add for the workers (the launcher's own environment is inherited).

    Those of every job, then those of the job's launch hook (judged on what the workers will see:
    `environ`, the variables above, then `--env` pairs), then `--env` pairs.
    """
    env = {env_vars.LAUNCHED: "1"}
    if options.cpu:
        env[env_vars.USE_CPU] = "1"
    if options.mixed_precision is not None:
        env[env_vars.MIXED_PRECISION] = options.mixed_precision
    if options.gradient_accumulation_steps is not None:
        env[env_vars.GRADIENT_ACCUMULATION_STEPS] = str(options.gradient_accumulation_steps)
    if options.debug:
        env[env_vars.DEBUG_MODE] = "1"
    if options.distributed_type is not None:
        env[env_vars.DISTRIBUTED_TYPE] = options.distributed_type
    if options.hang_timeout is not None:
        env[env_vars.HANG_TIMEOUT] = f"{options.hang_timeout:g}"
    if options.downcast_bf16:
        env[env_vars.DOWNCAST_BF16] = "1"
    if options.enable_cpu_affinity:
        env[env_vars.ENABLE_CPU_AFFINITY] = "1"
    if options.dynamo_backend is not None:
        env[env_vars.DYNAMO_BACKEND] = options.dynamo_backend
    env.update(options.dynamo)
    if options.parallelism:
        # Every size, as Accelerate passes them: the ranks need not know the defaults.
        env[env_vars.USE_PARALLELISM_CONFIG] = "1"
        for dimension, var in PARALLELISM_DIMENSIONS.items():
            env[var] = str(options.parallelism.get(dimension, 1))
    if options.gpu_ids not in (None, "all") and not options.cpu:
        env["CUDA_VISIBLE_DEVICES"] = str(options.gpu_ids)
    hook = hook_of_type(options.distributed_type)
    if hook is not None:
        seen = {**environ, **env, **options.env}
        job = WorkerJob(options.num_processes, options.cpu, dict(options.engine_settings), seen)
        env.update(hook.env_for(job))
    if not options.is_multi_machine:
        # Their listening sockets would otherwise take the address the host name resolves to.
        interface = loopback_interface()
        for name in _SOCKET_INTERFACE_VARS:
            if interface is not None and name not in environ:
                env[name] = interface
    if options.num_processes > 1 and "OMP_NUM_THREADS" not in environ:
        # torchrun would set the same value, but with a banner warning on every launch.
        env["OMP_NUM_THREADS"] = "1"
    env.update(options.env)
    return env


def build_replica_call(
    options: LaunchOptions,
    script: str,
    script_args: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    launcher_pid: int | None = None,
) -> TorchrunCall:
    """Return the argv (interpreter first) and env of the program that starts a job whose launch hook
    starts its replicas itself (see accel_launch.launch._replica_worker); the env is `worker_env`'s."""
    environ = os.environ if environ is None else environ
    pid = os.getpid() if launcher_pid is None else launcher_pid
    argv = [sys.executable, "-u", "-m", REPLICA_WORKER, str(pid), str(options.num_processes)]
    if options.module:
        argv.append("-m")
    argv.append(script)
    argv.extend(script_args)
    return TorchrunCall(argv=argv, env=worker_env(options, environ))
