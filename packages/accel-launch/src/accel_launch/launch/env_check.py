"""Checks, before anything starts, of the ACCEL_* env vars the ranks will read.

A rank reads them when it builds its state; a value it cannot use there fails every rank with a
traceback. The launcher checks them first and says in one line which variable holds what. The
names come from accel_state.environment.env_vars, the one list of them; every ACCEL_* name there
has a check here or in the launch hook of the engine that reads it (a test keeps it so). The
config-key variables (ACCEL_MIXED_PRECISION, ...) are read into the config first and fail there
with the same kind of line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from accel_launch.config.schema import ConfigError
from accel_state.compilation.plugin import MODES as DYNAMO_MODES
from accel_state.environment import env_vars
from accel_state.environment.choices import LOG_LEVEL_CHOICES, MIXED_PRECISION_CHOICES
from accel_state.seam.launch_hook import ConfigKey, launch_hooks, launchable_types

# The words accel_state.environment.env_vars.read_flag accepts.
_BOOLEAN_WORDS = {"1", "true", "yes", "on", "0", "false", "no", "off"}


def _boolean(raw: str) -> str | None:
    return None if raw.lower() in _BOOLEAN_WORDS else "is not a boolean (use 1/0, true/false)"


def _positive_seconds(raw: str) -> str | None:
    try:
        value = float(raw)
    except ValueError:
        return "is not a number of seconds"
    return None if math.isfinite(value) and value > 0 else "must be a finite number of seconds above 0"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    # The ranks read these in any case (`bf16`, `BF16`).
    accepted = {choice.lower() for choice in choices}

    def check(raw: str) -> str | None:
        return None if raw.lower() in accepted else f"must be one of {', '.join(choices)}"

    return check


def _anything(raw: str) -> str | None:
    return None


def _integer_at_least(minimum: int | None) -> Callable[[str], str | None]:
    def check(raw: str) -> str | None:
        try:
            value = int(raw)
        except ValueError:
            return "is not an integer"
        return None if minimum is None or value >= minimum else f"must be at least {minimum}"

    return check


def _number_at_least(minimum: float | None) -> Callable[[str], str | None]:
    def check(raw: str) -> str | None:
        try:
            value = float(raw)
        except ValueError:
            return "is not a number"
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            at_least = "" if minimum is None else f" of {minimum:g} or more"
            return f"must be a finite number{at_least}"
        return None

    return check


# The ACCEL_* variables of accel_state.environment.env_vars that are no engine's, and what their
# values must be. An engine's come from its launch hook's keys (`env_checks`).
CHECKS: dict[str, Callable[[str], str | None]] = {
    env_vars.USE_CPU: _boolean,
    env_vars.MIXED_PRECISION: _one_of(MIXED_PRECISION_CHOICES),
    env_vars.GRADIENT_ACCUMULATION_STEPS: _integer_at_least(1),
    env_vars.DEBUG_MODE: _boolean,
    env_vars.TIMEOUT: _positive_seconds,
    env_vars.HANG_TIMEOUT: _positive_seconds,
    env_vars.DIAGNOSIS_DIR: _anything,  # a folder the launcher sets; the ranks skip one that does not exist
    env_vars.DISTRIBUTED_TYPE: lambda raw: _one_of(launchable_types())(raw),
    env_vars.DOWNCAST_BF16: _boolean,
    env_vars.ENABLE_CPU_AFFINITY: _boolean,
    env_vars.DYNAMO_BACKEND: _anything,  # a torch.compile backend, which TorchDynamoPlugin checks by name
    env_vars.DYNAMO_MODE: _one_of(DYNAMO_MODES),
    env_vars.DYNAMO_USE_FULLGRAPH: _boolean,
    env_vars.DYNAMO_USE_DYNAMIC: _boolean,
    env_vars.DYNAMO_USE_REGIONAL_COMPILATION: _boolean,
    env_vars.COMPILE_CACHE_DIR: _anything,  # a folder, created when the first model is compiled
    env_vars.USE_PARALLELISM_CONFIG: _boolean,
    env_vars.PARALLELISM_DP_REPLICATE_SIZE: _integer_at_least(1),
    env_vars.PARALLELISM_DP_SHARD_SIZE: _integer_at_least(1),
    env_vars.PARALLELISM_TP_SIZE: _integer_at_least(1),
    env_vars.PARALLELISM_CP_SIZE: _integer_at_least(1),
    env_vars.CHECK_COLLECTIVES: _boolean,
    env_vars.PROGRESS: _boolean,
    env_vars.LOG_LEVEL: _one_of(LOG_LEVEL_CHOICES),
    env_vars.LAUNCHED: _anything,  # the launcher sets it to 1 whatever it was
    env_vars.CONFIG_FILE: _anything,  # read by the launcher, whose config errors name it
    env_vars.HOME: _anything,  # likewise
}


def key_check(key: ConfigKey) -> Callable[[str], str | None]:
    """Return the check of `key`'s env var: its own, else what its kind, choices and minimum say."""
    if key.env_check is not None:
        return key.env_check
    if key.choices:
        return _one_of(key.choices)
    if key.kind == "bool":
        return _boolean
    if key.kind == "int":
        return _integer_at_least(key.minimum)
    if key.kind == "float":
        return _number_at_least(key.minimum)
    return _anything


def env_checks() -> dict[str, Callable[[str], str | None]]:
    """Return the check of every ACCEL_* variable the ranks may read: the core ones, then each
    launch hook's keys' (an adapter that is not installed brings none)."""
    checks = dict(CHECKS)
    for hook in launch_hooks().values():
        for key in hook.keys:
            if key.env_var is not None:
                checks.setdefault(key.env_var, key_check(key))
    return checks


def check_accel_env(environ: Mapping[str, str], where: str = "environment variable") -> None:
    """Raise ConfigError naming the first ACCEL_* variable of `environ` the ranks could not use.

    `where` starts the message: "environment variable" for the launcher's environment, "--env"
    for the flag's pairs. Unset and empty variables mean "not set", as for the ranks.
    """
    for name, check in env_checks().items():
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        problem = check(raw.strip())
        if problem is not None:
            raise ConfigError(f"{where} {name}={raw!r} {problem}")
