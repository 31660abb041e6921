"""Turns LaunchOptions into the arguments of `torch.distributed.run` and the workers' env vars.

Kept free of side effects (the free port and the parent environment are passed in) so that what
the launcher would start can be checked without starting anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accel_launch.launch_options import LaunchOptions
from accel_launch.ports import LOCALHOST, find_free_port
from accel_state import env_vars

# torchrun's own default when no port is given on a multi-machine job.
DEFAULT_MULTI_MACHINE_PORT = 29500


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
) -> list[str]:
    """Return the argv for `torch.distributed.run`: a static rendezvous, then the script untouched."""
    if options.is_multi_machine:
        # validate() guarantees the address; every machine must agree on the port, so no guessing.
        master_addr = str(options.main_process_ip)
        master_port = options.main_process_port or DEFAULT_MULTI_MACHINE_PORT
    else:
        # One machine: stay on loopback, and take a free port so concurrent jobs do not collide.
        master_addr = options.main_process_ip or LOCALHOST
        master_port = options.main_process_port or free_port()
    argv = [
        "--nnodes", str(options.num_machines),
        "--nproc_per_node", str(options.num_processes),
        "--max_restarts", str(options.max_restarts),
        "--monitor_interval", str(options.monitor_interval),
    ]  # fmt: skip
    if options.rdzv_backend == "c10d":
        # c10d assigns node ranks at the rendezvous; machine 0 hosts the store at the endpoint.
        argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{master_addr}:{master_port}"]
        if options.machine_rank == 0:
            argv += ["--rdzv_conf", "is_host=1"]
        elif options.is_multi_machine:
            argv += ["--rdzv_conf", "is_host=0"]
    else:
        argv += [
            "--node_rank", str(options.machine_rank),
            "--master_addr", master_addr,
            "--master_port", str(master_port),
            "--rdzv_backend", "static",
        ]  # fmt: skip
    if options.log_dir is not None:
        argv += ["--log_dir", options.log_dir]
    if options.tee is not None:
        argv += ["--tee", options.tee]
    if options.module:
        argv.append("--module")
    # The script marks the end of torchrun's flags: argparse's REMAINDER keeps what follows as is.
    argv.append(script)
    argv.extend(script_args)
    return argv


def worker_env(options: LaunchOptions, environ: Mapping[str, str]) -> dict[str, str]:
    """Return the env vars to add for the workers (the launcher's own environment is inherited)."""
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
    if options.downcast_bf16:
        env[env_vars.DOWNCAST_BF16] = "1"
    if options.enable_cpu_affinity:
        env[env_vars.ENABLE_CPU_AFFINITY] = "1"
    if options.dynamo_backend is not None:
        env[env_vars.DYNAMO_BACKEND] = options.dynamo_backend
    if options.gpu_ids not in (None, "all") and not options.cpu:
        env["CUDA_VISIBLE_DEVICES"] = str(options.gpu_ids)
    if options.num_processes > 1 and "OMP_NUM_THREADS" not in environ:
        # torchrun would set the same value, but with a banner warning on every launch.
        env["OMP_NUM_THREADS"] = "1"
    env.update(options.env)
    return env
