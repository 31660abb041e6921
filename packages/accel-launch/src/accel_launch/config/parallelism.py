"""The N-D parallelism settings (Accelerate's `parallelism_config`): which are on, and the checks
that must pass before any process starts.

The ranks build their device mesh from the ACCEL_PARALLELISM_CONFIG_* variables; a mesh whose
sizes do not multiply to the world size, or a context-parallel mesh on the CPU, would fail every
rank with a traceback after the rendezvous. Here each is one line naming the setting at fault.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from accel_launch.config.schema import (
    PARALLELISM_DIMENSIONS,
    PARALLELISM_KEYS,
    PARALLELISM_SWITCH,
    ConfigError,
)
from accel_state.parallelism.config import CP_NEEDS_CUDA  # why cp_size > 1 cannot run on the CPU


class ResolvedConfig(Protocol):
    """What the checks read of an effective config (accel_launch.config.effective.EffectiveConfig,
    which imports this module): each value, its source, whether it was given, and where."""

    @property
    def sources(self) -> dict[str, str]: ...

    def __getitem__(self, name: str) -> Any: ...

    def given(self, name: str) -> Any: ...

    def where(self, name: str) -> str: ...


def setting_of(dimension: str) -> str:
    """Return the setting (flag and section key) of mesh `dimension` ("tp": parallelism_config_tp_size)."""
    return f"parallelism_config_{dimension}_size"


def mesh_sizes(config: ResolvedConfig) -> dict[str, int]:
    """Return each mesh dimension's size when use_parallelism_config is on, else an empty dict."""
    if not config[PARALLELISM_SWITCH.name]:
        return {}
    return {dimension: int(config[setting_of(dimension)]) for dimension in PARALLELISM_DIMENSIONS}


def mesh_problem(
    sizes: Mapping[str, int], world_size: int, world: str, where: Callable[[str], str]
) -> str | None:
    """Return the one-line problem of mesh `sizes` for `world_size` processes, else None.

    `where(dimension)` says where a size came from; `world` how the world size was counted.
    """
    for dimension, size in sizes.items():
        if size < 1:
            return f"{where(dimension)} must be at least 1, got {size}"
    product = math.prod(sizes.values())
    if product == world_size:
        return None
    factors = " * ".join(f"{dimension} {size} ({where(dimension)})" for dimension, size in sizes.items())
    return (
        f"parallelism_config sizes {factors} = {product}, but the world size is {world_size} ({world}): "
        "the sizes must multiply to the world size"
    )


def check_parallelism(config: ResolvedConfig) -> None:
    """Raise ConfigError for parallelism settings that no job could run, naming where each was set.

    A size set by a flag or env var while use_parallelism_config is off would be ignored by the
    ranks (Accelerate drops it silently); it is refused instead, saying how to turn it on.
    """
    switch = PARALLELISM_SWITCH.name
    if not config[switch]:
        for name in PARALLELISM_KEYS:
            if config.sources[name] not in ("flag", "env"):
                continue
            state = (
                "is not set" if config.sources[switch] == "default" else f"is false ({config.where(switch)})"
            )
            raise ConfigError(
                f"{config.where(name)} is a parallelism config size, but use_parallelism_config {state}: "
                f"add --use_parallelism_config (or set {PARALLELISM_SWITCH.env_var}=1)"
            )
        return

    processes, machines = config["num_processes"], config["num_machines"]
    world = f"num_processes {processes} ({_source_of(config, 'num_processes')})"
    if machines > 1:
        world += f" * num_machines {machines} ({_source_of(config, 'num_machines')})"
    problem = mesh_problem(
        mesh_sizes(config),
        processes * machines,
        world,
        lambda dimension: _source_of(config, setting_of(dimension)),
    )
    if problem is not None:
        raise ConfigError(problem)
    cp = setting_of("cp")
    on_cpu = (
        config.where("use_cpu")
        if config["use_cpu"]
        else config.where("distributed_type")
        if config.given("distributed_type") == "MULTI_CPU"
        else None
    )
    if config[cp] > 1 and on_cpu is not None:
        raise ConfigError(
            f"{config.where(cp)} is {config[cp]} but {on_cpu} runs the job on the CPU: {CP_NEEDS_CUDA}; "
            "use a context-parallel size of 1 on the CPU"
        )


def _source_of(config: ResolvedConfig, name: str) -> str:
    return "default" if config.sources[name] == "default" else config.where(name)
