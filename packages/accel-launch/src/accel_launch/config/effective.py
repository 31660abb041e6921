"""The effective config: defaults < SLURM allocation < config file < ACCEL_* env vars < flags, with where
each value came from.

Combination checks run here, on the merged values, so that an error names the flag, the env var or
the file key that holds the offending value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_launch.config.parallelism import check_parallelism
from accel_launch.config.schema import (
    DYNAMO_SECTION,
    HOOK_OF,
    HOOKS,
    IMPLIED_BY_SECTION,
    SECTION_OF,
    SECTION_SETTINGS,
    SETTINGS,
    ConfigError,
    coerce_value,
)
from accel_launch.config.slurm_allocation import SOURCE as ALLOCATION
from accel_launch.config.slurm_allocation import allocation_settings
from accel_state.compilation.errors import CompileConfigError
from accel_state.compilation.plugin import dynamo_backend_named
from accel_state.environment.choices import MIXED_PRECISION_CHOICES
from accel_state.seam.launch_hook import LaunchHook, LaunchHookError, launchable_types

DEFAULT, FILE, ENV, FLAG = "default", "file", "env", "flag"
# The distributed types a job may run on the CPU with (`use_cpu`), as each hook says.
CPU_TYPES = tuple(kind for hook in HOOKS.values() for kind in hook.cpu_types)


@dataclass(frozen=True)
class EffectiveConfig:
    """Every setting's value and its source ("default", "slurm", "file", "env" or "flag"), and the file read.

    The settings are the file's top-level keys and the keys of its typed sections under their
    own names (a section's key `x` is the setting `x`).
    """

    values: dict[str, Any]
    sources: dict[str, str]
    path: Path | None = None
    env_names: dict[str, str] = field(default_factory=dict)
    # The SLURM variable each setting of source "slurm" was read from.
    allocation_names: dict[str, str] = field(default_factory=dict)
    # Settings dropped because a stronger source contradicted them: name -> what gave way to what.
    overridden: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def given(self, name: str) -> Any:
        """Return the value of `name` if someone set it (file, env or flag), else None."""
        return None if self.sources[name] == DEFAULT else self.values[name]

    def where(self, name: str) -> str:
        """Return where `name` was set, as a prefix for an error message."""
        source = self.sources[name]
        if source == FLAG:
            return f"--{name}"
        if source == ENV:
            return f"environment variable {self.env_names[name]}"
        if source == ALLOCATION:
            return f"the SLURM allocation's {self.allocation_names[name]}"
        if source == FILE and name in IMPLIED_BY_SECTION:
            return f"{self.path}: section '{IMPLIED_BY_SECTION[name]}'"
        if source == FILE:
            section = SECTION_OF.get(name)
            return f"{self.path}: key '{section}.{name}'" if section else f"{self.path}: key '{name}'"
        return f"default {name}"

    @property
    def hook(self) -> LaunchHook | None:
        """Return the launch hook of the distributed type given, None when none is or no hook starts it."""
        return hook_of_type(self.given("distributed_type"))


def hook_of_type(distributed_type: str | None) -> LaunchHook | None:
    """Return the hook that starts `distributed_type` (None: the default one's), else None."""
    wanted = distributed_type or "NO"
    return next((hook for hook in HOOKS.values() if wanted in hook.distributed_types), None)


def config_env_names() -> dict[str, str]:
    """Return the ACCEL_* env var that may set each setting (names from accel_state's env_vars)."""
    return {name: key.env_var for name, key in SETTINGS.items() if key.env_var is not None}


def resolve_config(
    file_values: Mapping[str, Any] | None,
    flags: Mapping[str, Any],
    *,
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> EffectiveConfig:
    """Return the merged config; `flags` holds only the flags given on the command line."""
    environ = os.environ if environ is None else environ
    env_names = config_env_names()
    values = {name: key.default for name, key in SETTINGS.items()}
    sources = dict.fromkeys(SETTINGS, DEFAULT)
    allocation = allocation_settings(environ)
    for name, setting in allocation.items():
        values[name], sources[name] = setting.value, ALLOCATION
    for name, value in (file_values or {}).items():
        if value is not None:
            values[name], sources[name] = value, FILE
    for name in SECTION_SETTINGS:
        value = ((file_values or {}).get(SECTION_OF[name]) or {}).get(name)
        if value is not None:
            values[name], sources[name] = value, FILE
    for name, section in IMPLIED_BY_SECTION.items():
        if (file_values or {}).get(section):
            values[name], sources[name] = True, FILE
    for name, var in env_names.items():
        raw = environ.get(var)
        if raw is not None and raw.strip() != "":
            values[name], sources[name] = _env_value(name, var, raw.strip()), ENV
    for name, value in flags.items():
        if value is not None:
            values[name], sources[name] = _flag_value(name, value), FLAG
    dynamo = values.get("dynamo_config") or {}
    if values["dynamo_backend"] is None and isinstance(dynamo, dict) and dynamo.get("dynamo_backend"):
        values["dynamo_backend"], sources["dynamo_backend"] = (
            str(dynamo["dynamo_backend"]),
            sources["dynamo_config"],
        )
    allocation_names = {name: setting.variable for name, setting in allocation.items()}
    config = EffectiveConfig(values, sources, path, env_names, allocation_names)
    _take_section_fallbacks(config)
    _let_stronger_values_win(config)
    check_combinations(config)
    return config


def _flag_value(name: str, value: Any) -> Any:
    # click has checked the type; the choices of the section settings (zero_stage 0-3, a clipping
    # norm of 0 or more) are checked here, with the file's words.
    if name not in SECTION_SETTINGS:
        return value
    try:
        return coerce_value(SECTION_SETTINGS[name], value)
    except ConfigError as error:
        raise ConfigError(f"--{name} {error}") from None


def _take_section_fallbacks(config: EffectiveConfig) -> None:
    """Use the job's section value of a top-level key (`ConfigKey.top_level`) when nothing set that key.

    Accelerate writes `gradient_accumulation_steps` in an engine's section; a file giving both keys
    different values is refused.
    """
    hook = config.hook
    if hook is None or hook.section is None or config.given("distributed_type") is None:
        return
    section = config.values.get(hook.section) or {}
    for key in hook.keys:
        value = section.get(key.name)
        if not key.top_level or value is None:
            continue
        name = key.name
        if config.sources[name] == DEFAULT:
            config.values[name], config.sources[name] = value, FILE
        elif config.sources[name] == FILE and config.values[name] != value:
            raise ConfigError(
                f"{config.path}: key '{name}' is {config.values[name]} but key '{hook.section}.{name}' "
                f"is {value}; keep one of them"
            )


def _env_value(name: str, var: str, raw: str) -> Any:
    key = SETTINGS[name]
    value: Any = raw
    if key.kind == "bool":
        words = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "off": False}
        if raw.lower() not in words and raw.lower() != "no":
            raise ConfigError(f"environment variable {var}={raw!r} is not a boolean (use 1/0, true/false)")
        value = words.get(raw.lower(), False)
    elif key.kind == "int":
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"environment variable {var}={raw!r} is not an integer") from None
    elif key.kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"environment variable {var}={raw!r} is not a number") from None
    try:
        return coerce_value(key, value)
    except ConfigError as error:
        raise ConfigError(f"environment variable {var} {error}") from None


def infer_distributed_type(config: EffectiveConfig, cuda_available: bool) -> str:
    """Return the distributed type to run: the one set, else NO / MULTI_CPU / MULTI_GPU from the counts."""
    chosen = config.given("distributed_type")
    if chosen is not None:
        return chosen
    if config["num_processes"] * config["num_machines"] == 1:
        return "NO"
    return "MULTI_GPU" if cuda_available and not config["use_cpu"] else "MULTI_CPU"


def _check_dynamo_backend(config: EffectiveConfig) -> None:
    value, where = config.values["dynamo_backend"], config.where("dynamo_backend")
    section = config.values.get(DYNAMO_SECTION)
    if (
        config.sources["dynamo_backend"] == FILE
        and isinstance(section, dict)
        and section.get("dynamo_backend") == value
    ):
        where = f"{config.path}: key '{DYNAMO_SECTION}.dynamo_backend'"
    try:
        dynamo_backend_named(value, where)
    except CompileConfigError as error:
        raise ConfigError(str(error)) from None


def check_combinations(config: EffectiveConfig) -> None:
    """Raise ConfigError for values that cannot go together, naming where the culprit was set."""
    values = config.values
    _check_section_flags_need_their_job(config)
    if values["machine_rank"] >= values["num_machines"]:
        raise ConfigError(
            f"{config.where('machine_rank')} must be below num_machines ({values['num_machines']}), "
            f"got {values['machine_rank']}"
        )
    if values["num_machines"] > 1 and not values["main_process_ip"]:
        raise ConfigError(
            f"{config.where('num_machines')} is {values['num_machines']} but main_process_ip is not set "
            "(--main_process_ip: the address of the machine with machine_rank 0)"
        )
    if values["main_process_port"] is not None and values["main_process_port"] > 65535:
        raise ConfigError(
            f"{config.where('main_process_port')} must be in [1, 65535], got {values['main_process_port']}"
        )
    if config.given("dynamo_backend") is not None:  # refused here, before any process starts
        _check_dynamo_backend(config)
    distributed_type = config.given("distributed_type")
    if distributed_type is not None and values["use_cpu"] and distributed_type not in CPU_TYPES:
        raise ConfigError(
            f"{config.where('distributed_type')} is {distributed_type} but {config.where('use_cpu')} is "
            "true; use MULTI_CPU on the CPU"
        )
    check_parallelism(config)
    for hook in HOOKS.values():
        try:
            hook.check(config)
        except LaunchHookError as error:
            raise ConfigError(str(error)) from None


# How strongly each source binds: a value set more strongly wins over one it contradicts.
_RANK = {DEFAULT: 0, ALLOCATION: 1, FILE: 2, ENV: 3, FLAG: 4}
# The distributed types that only say "several processes on this kind of device": a count or
# --cpu given more strongly than them picks the type again, as if they had not been set.
_COUNT_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU")


def _let_stronger_values_win(config: EffectiveConfig) -> None:
    """Settle a distributed type that contradicts a count or use_cpu set more strongly.

    A flag beats the file (Accelerate: `--num_processes 2` with a file's `distributed_type: NO`
    runs two processes): the file's type is dropped and inferred again from the counts, as with
    no type set. A type set more strongly than the count keeps the count it implies (NO: one
    process). Values set equally strongly (two flags, or one file) that contradict each other
    are left for check_combinations to refuse.
    """
    values, sources = config.values, config.sources
    kind = config.given("distributed_type")
    if kind is None:
        return
    type_rank = _RANK[sources["distributed_type"]]
    culprits = ["num_processes", "num_machines"] if kind == "NO" else []
    if kind not in CPU_TYPES:
        # MULTI_GPU and the engines that need a device: `accel config default` writes `use_cpu: true`
        # on a machine without a GPU, and an engine's selector (or --distributed_type) must still
        # beat that file.
        culprits.append("use_cpu")
    for name in culprits:
        contradicts = values[name] is True or (not isinstance(values[name], bool) and values[name] > 1)
        if not contradicts or _RANK[sources[name]] == type_rank:
            continue
        if _RANK[sources[name]] > type_rank:
            if kind not in _COUNT_TYPES:
                continue  # an engine's type is never guessed again: check_combinations refuses
            loser, winner = "distributed_type", name
        else:
            loser, winner = name, "distributed_type"
        config.overridden[loser] = (
            f"{config.where(loser)} {values[loser]} gave way to {config.where(winner)} {values[winner]}"
        )
        if loser == "distributed_type":
            values[loser], sources[loser] = None, DEFAULT
            return
        values[loser], sources[loser] = (False if loser == "use_cpu" else 1), DEFAULT


def _check_section_flags_need_their_job(config: EffectiveConfig) -> None:
    """Raise ConfigError for a section flag (`--zero_stage`) given to a job of another engine."""
    kind = config.given("distributed_type")
    for name in SECTION_SETTINGS:
        hook = HOOK_OF.get(name)
        if hook is None or config.sources[name] != FLAG or kind in hook.distributed_types:
            continue
        asks = f"add --{hook.selector.names[0]} (or set " if hook.selector else "("
        raise ConfigError(
            f"--{name} is {hook.article} {hook.title} option: {asks}distributed_type: "
            f"{hook.distributed_types[0]})"
        )


def check_launchable(config: EffectiveConfig) -> None:
    """Raise ConfigError when the distributed type is valid but not one `accel launch` can start yet."""
    distributed_type = config.given("distributed_type")
    launchable = launchable_types()
    if distributed_type is not None and distributed_type not in launchable:
        raise ConfigError(
            f"{config.where('distributed_type')} is {distributed_type}, which accel launch cannot start yet "
            f"(supported: {', '.join(launchable)})"
        )
    if config["mixed_precision"] not in MIXED_PRECISION_CHOICES:
        raise ConfigError(
            f"{config.where('mixed_precision')} is {config['mixed_precision']}, which accel cannot run yet "
            f"(supported: {', '.join(MIXED_PRECISION_CHOICES)})"
        )
    if config["compute_environment"] != "LOCAL_MACHINE":
        raise ConfigError(
            f"{config.where('compute_environment')} is {config['compute_environment']}, "
            "which accel launch cannot start (only LOCAL_MACHINE)"
        )
