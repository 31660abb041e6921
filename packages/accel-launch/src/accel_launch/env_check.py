"""Checks, before anything starts, of the ACCEL_* env vars the ranks will read.

A rank reads them when it builds its state; a value it cannot use there fails every rank with a
traceback. The launcher checks them first and says in one line which variable holds what. The
names come from accel_state.environment.env_vars, the one list of them, and every ACCEL_* name there has a
check here (a test keeps it so). The config-key variables (ACCEL_MIXED_PRECISION, ...) are read
into the config first and fail there with the same kind of line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from accel_launch.config_schema import ConfigError
from accel_state.environment import env_vars
from accel_state.environment.choices import (
    DEEPSPEED_OFFLOAD_DEVICES,
    FSDP_AUTO_WRAP_POLICIES,
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
    LOG_LEVEL_CHOICES,
    MIXED_PRECISION_CHOICES,
    ZERO_STAGES,
)
from accel_state.environment.json_object import json_object_problem
from accel_state.seam.launch_hook import launchable_types

# The words accel_state.environment.env_vars.read_flag accepts.
_BOOLEAN_WORDS = {"1", "true", "yes", "on", "0", "false", "no", "off"}


def _boolean(raw: str) -> str | None:
    return None if raw.lower() in _BOOLEAN_WORDS else "is not a boolean (use 1/0, true/false)"


def _positive_integer(raw: str) -> str | None:
    try:
        value = int(raw)
    except ValueError:
        return "is not an integer"
    return None if value >= 1 else "must be at least 1"


def _positive_seconds(raw: str) -> str | None:
    try:
        value = float(raw)
    except ValueError:
        return "is not a number of seconds"
    return None if math.isfinite(value) and value > 0 else "must be a finite number of seconds above 0"


def _norm(raw: str) -> str | None:
    try:
        value = float(raw)
    except ValueError:
        return "is not a number"
    return None if math.isfinite(value) and value >= 0 else "must be a finite number of 0 or more"


def _deepspeed_json(raw: str) -> str | None:
    problem = json_object_problem(raw)
    return None if problem is None else f"is not a usable DeepSpeed config ({problem})"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    # The ranks read these in any case (`bf16`, `BF16`).
    accepted = {choice.lower() for choice in choices}

    def check(raw: str) -> str | None:
        return None if raw.lower() in accepted else f"must be one of {', '.join(choices)}"

    return check


def _anything(raw: str) -> str | None:
    return None


# Every ACCEL_* variable of accel_state.environment.env_vars and what its value must be.
CHECKS: dict[str, Callable[[str], str | None]] = {
    env_vars.USE_CPU: _boolean,
    env_vars.MIXED_PRECISION: _one_of(MIXED_PRECISION_CHOICES),
    env_vars.GRADIENT_ACCUMULATION_STEPS: _positive_integer,
    env_vars.DEBUG_MODE: _boolean,
    env_vars.TIMEOUT: _positive_seconds,
    env_vars.DISTRIBUTED_TYPE: lambda raw: _one_of(launchable_types())(raw),
    env_vars.DOWNCAST_BF16: _boolean,
    env_vars.ENABLE_CPU_AFFINITY: _boolean,
    env_vars.DYNAMO_BACKEND: _anything,  # a torch.compile backend name, which torch checks when compiling
    env_vars.GRADIENT_CLIPPING: _norm,
    env_vars.DEEPSPEED_CONFIG_FILE: _deepspeed_json,
    env_vars.DEEPSPEED_ZERO_STAGE: _one_of(tuple(str(stage) for stage in ZERO_STAGES)),
    env_vars.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE: _one_of(DEEPSPEED_OFFLOAD_DEVICES),
    env_vars.DEEPSPEED_OFFLOAD_PARAM_DEVICE: _one_of(DEEPSPEED_OFFLOAD_DEVICES),
    env_vars.DEEPSPEED_ZERO3_INIT: _boolean,
    env_vars.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL: _boolean,
    env_vars.FSDP_VERSION: _one_of(("1", "2")),  # 1 is refused with its own message, by the config check
    env_vars.FSDP_AUTO_WRAP_POLICY: _one_of(FSDP_AUTO_WRAP_POLICIES),
    env_vars.FSDP_TRANSFORMER_CLS_TO_WRAP: _anything,  # class names, checked against the model
    env_vars.FSDP_MIN_NUM_PARAMS: _positive_integer,
    env_vars.FSDP_RESHARD_AFTER_FORWARD: _boolean,
    env_vars.FSDP_STATE_DICT_TYPE: _one_of(FSDP_STATE_DICT_TYPES),
    env_vars.FSDP_CPU_RAM_EFFICIENT_LOADING: _boolean,
    env_vars.FSDP_ACTIVATION_CHECKPOINTING: _boolean,
    env_vars.FSDP_OFFLOAD_PARAMS: _boolean,
    env_vars.FSDP_SHARDING_STRATEGY: _one_of((*FSDP_SHARDING_STRATEGIES, "1", "2", "3", "4", "5")),
    env_vars.CHECK_COLLECTIVES: _boolean,
    env_vars.LOG_LEVEL: _one_of(LOG_LEVEL_CHOICES),
    env_vars.LAUNCHED: _anything,  # the launcher sets it to 1 whatever it was
    env_vars.CONFIG_FILE: _anything,  # read by the launcher, whose config errors name it
    env_vars.HOME: _anything,  # likewise
}


def check_accel_env(environ: Mapping[str, str], where: str = "environment variable") -> None:
    """Raise ConfigError naming the first ACCEL_* variable of `environ` the ranks could not use.

    `where` starts the message: "environment variable" for the launcher's environment, "--env"
    for the flag's pairs. Unset and empty variables mean "not set", as for the ranks.
    """
    for name, check in CHECKS.items():
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        problem = check(raw.strip())
        if problem is not None:
            raise ConfigError(f"{where} {name}={raw!r} {problem}")
