"""The options of `accel launch`, checked once so the rest of the launcher can trust them.

This module imports no torch (of accel_state only its torch-free choices): the CLI builds a
LaunchOptions before it decides to start anything, and `accel --help` must stay fast.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_launch.config.parallelism import CP_NEEDS_CUDA, mesh_problem, setting_of
from accel_launch.config.schema import PARALLELISM_DIMENSIONS, RDZV_BACKENDS
from accel_state.environment.choices import CONFIG_MIXED_PRECISION_CHOICES
from accel_state.seam.launch_hook import LaunchHookError

TEE_CHOICES = ("0", "1", "2", "3")


class LaunchOptionsError(LaunchHookError):
    """A launch option, or a combination of them, that cannot be launched; the message names the flag."""


@dataclass(frozen=True)
class LaunchOptions:
    """The parsed flags of `accel launch`; None means "not given", so the library's own default applies."""

    cpu: bool = False
    num_processes: int = 1
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int | None = None
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    debug: bool = False
    max_restarts: int = 0
    monitor_interval: float = 0.1
    module: bool = False
    env: dict[str, str] = field(default_factory=dict)
    rdzv_backend: str = "static"
    log_dir: str | None = None
    tee: str | None = None
    # Seconds without progress on any rank before the job is diagnosed and stopped (None: off).
    hang_timeout: float | None = None
    distributed_type: str | None = None
    gpu_ids: str | None = None
    downcast_bf16: bool = False
    enable_cpu_affinity: bool = False
    dynamo_backend: str | None = None
    # The torch.compile settings given (ACCEL_DYNAMO_* variable -> its value), for the workers.
    dynamo: dict[str, str] = field(default_factory=dict)
    # The settings of the job's section that were given (its launch hook turns them into env vars).
    engine_settings: dict[str, Any] = field(default_factory=dict)
    # The N-D mesh's size per dimension ("dp_replicate", "dp_shard", "tp", "cp"); empty: no
    # parallelism config.
    parallelism: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def is_multi_machine(self) -> bool:
        """True when the job spans machines, so the rendezvous address must be reachable from all."""
        return self.num_machines > 1

    def validate(self) -> None:
        """Raise LaunchOptionsError naming the first flag whose value cannot be launched."""
        if self.num_processes < 1:
            raise LaunchOptionsError(f"--num_processes must be at least 1, got {self.num_processes}")
        if self.num_machines < 1:
            raise LaunchOptionsError(f"--num_machines must be at least 1, got {self.num_machines}")
        if not 0 <= self.machine_rank < self.num_machines:
            raise LaunchOptionsError(
                f"--machine_rank must be in [0, {self.num_machines - 1}] for --num_machines "
                f"{self.num_machines}, got {self.machine_rank}"
            )
        if self.is_multi_machine and not self.main_process_ip:
            raise LaunchOptionsError(
                f"--main_process_ip is required when --num_machines is {self.num_machines} "
                "(the address of the machine with --machine_rank 0)"
            )
        if self.main_process_port is not None and not 1 <= self.main_process_port <= 65535:
            raise LaunchOptionsError(
                f"--main_process_port must be in [1, 65535], got {self.main_process_port}"
            )
        if self.mixed_precision is not None and self.mixed_precision not in CONFIG_MIXED_PRECISION_CHOICES:
            raise LaunchOptionsError(
                f"--mixed_precision must be one of {', '.join(CONFIG_MIXED_PRECISION_CHOICES)}, "
                f"got {self.mixed_precision!r}"
            )
        if self.gradient_accumulation_steps is not None and self.gradient_accumulation_steps < 1:
            raise LaunchOptionsError(
                f"--gradient_accumulation_steps must be at least 1, got {self.gradient_accumulation_steps}"
            )
        if self.max_restarts < 0:
            raise LaunchOptionsError(f"--max_restarts must be 0 or more, got {self.max_restarts}")
        if not self.monitor_interval > 0:
            raise LaunchOptionsError(
                f"--monitor_interval must be a positive number of seconds, got {self.monitor_interval}"
            )
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise LaunchOptionsError(
                f"--rdzv_backend must be one of {', '.join(RDZV_BACKENDS)}, got {self.rdzv_backend!r}"
            )
        if self.tee is not None and self.tee not in TEE_CHOICES:
            raise LaunchOptionsError(
                f"--tee must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both), got {self.tee!r}"
            )
        if self.hang_timeout is not None and not self.hang_timeout > 0:
            raise LaunchOptionsError(
                f"--hang_timeout must be a positive number of seconds, got {self.hang_timeout}"
            )
        for key in self.env:
            _check_env_key(key)
        if self.parallelism:
            self._check_parallelism()

    def _check_parallelism(self) -> None:
        unknown = sorted(set(self.parallelism) - set(PARALLELISM_DIMENSIONS))
        if unknown:
            raise LaunchOptionsError(
                f"parallelism dimension {unknown[0]!r} is unknown "
                f"(known: {', '.join(PARALLELISM_DIMENSIONS)})"
            )
        sizes = {dimension: self.parallelism.get(dimension, 1) for dimension in PARALLELISM_DIMENSIONS}
        world = f"--num_processes {self.num_processes}"
        if self.is_multi_machine:
            world += f" * --num_machines {self.num_machines}"
        world_size = self.num_processes * self.num_machines
        problem = mesh_problem(sizes, world_size, world, lambda dimension: f"--{setting_of(dimension)}")
        if problem is not None:
            raise LaunchOptionsError(problem)
        if self.cpu and sizes["cp"] > 1:
            raise LaunchOptionsError(
                f"--{setting_of('cp')} is {sizes['cp']} but --cpu runs the job on the CPU: {CP_NEEDS_CUDA}"
            )


def parse_env_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """Return the KEY=VALUE strings of repeated `--env` flags as a dict; later keys win."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise LaunchOptionsError(f"--env expects KEY=VALUE, got {pair!r}")
        _check_env_key(key)
        env[key] = value
    return env


def check_script(script: str, module: bool) -> None:
    """Raise LaunchOptionsError when `script` is not a file we can start (modules are found by the worker)."""
    if module:
        if not script:
            raise LaunchOptionsError("--module needs a module name, got an empty string")
        return
    path = Path(script)
    if not path.exists():
        raise LaunchOptionsError(f"script not found: {script}")
    if not path.is_file():
        raise LaunchOptionsError(f"script is not a file: {script}")


def check_log_dir(log_dir: str | None) -> None:
    """Raise LaunchOptionsError when the agent could not create or write per-rank logs in `log_dir`.

    Checked before anything starts: the agent itself finds out only after the rendezvous.
    """
    if log_dir is None:
        return
    if not log_dir.strip():
        raise LaunchOptionsError("--log_dir needs a folder name, got an empty string")
    path = Path(log_dir)
    if path.exists() and not path.is_dir():
        raise LaunchOptionsError(f"--log_dir is not a folder: {log_dir}")
    # The agent creates missing folders: the nearest existing one must be a folder it can write in.
    existing = next(folder for folder in (path, *path.absolute().parents) if folder.exists())
    if not existing.is_dir():
        raise LaunchOptionsError(f"--log_dir cannot be created: {existing} is not a folder ({log_dir})")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise LaunchOptionsError(f"--log_dir is not writable: {existing} ({log_dir})")


def _check_env_key(key: str) -> None:
    if not key or "=" in key or "\0" in key:
        raise LaunchOptionsError(f"--env needs a non-empty variable name without '=', got {key!r}")
