"""Every environment variable through which the launcher and the library meet.

The launcher writes these and the library reads them; keeping them in one module keeps that
coupling visible. This module imports nothing heavy, so the CLI can use it without torch.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
import warnings
from collections.abc import Iterator, Mapping

# Options the launcher passes to the training script.
USE_CPU = "ACCEL_USE_CPU"
MIXED_PRECISION = "ACCEL_MIXED_PRECISION"
GRADIENT_ACCUMULATION_STEPS = "ACCEL_GRADIENT_ACCUMULATION_STEPS"
DEBUG_MODE = "ACCEL_DEBUG_MODE"
TIMEOUT = "ACCEL_TIMEOUT"
DISTRIBUTED_TYPE = "ACCEL_DISTRIBUTED_TYPE"  # which backend sets the process up
# Passed on from the config for the library and later backends (read by none of today's packages).
DOWNCAST_BF16 = "ACCEL_DOWNCAST_BF16"
ENABLE_CPU_AFFINITY = "ACCEL_ENABLE_CPU_AFFINITY"
# torch.compile (`accel launch --dynamo_backend inductor ...`, the config's `dynamo_config:`), read by
# TorchDynamoPlugin for the fields a script leaves unset; the compile cache's folder.
DYNAMO_BACKEND = "ACCEL_DYNAMO_BACKEND"
DYNAMO_MODE = "ACCEL_DYNAMO_MODE"
DYNAMO_USE_FULLGRAPH = "ACCEL_DYNAMO_USE_FULLGRAPH"
DYNAMO_USE_DYNAMIC = "ACCEL_DYNAMO_USE_DYNAMIC"
DYNAMO_USE_REGIONAL_COMPILATION = "ACCEL_DYNAMO_USE_REGIONAL_COMPILATION"
COMPILE_CACHE_DIR = "ACCEL_COMPILE_CACHE_DIR"
# N-D parallelism (`accel launch --use_parallelism_config --parallelism_config_tp_size 2 ...`, the
# config's `parallelism_config:`), read by ParallelismConfig for the sizes a script leaves unset.
USE_PARALLELISM_CONFIG = "ACCEL_USE_PARALLELISM_CONFIG"
PARALLELISM_DP_REPLICATE_SIZE = "ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE"
PARALLELISM_DP_SHARD_SIZE = "ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"
PARALLELISM_TP_SIZE = "ACCEL_PARALLELISM_CONFIG_TP_SIZE"
PARALLELISM_CP_SIZE = "ACCEL_PARALLELISM_CONFIG_CP_SIZE"
# DeepSpeed options (`accel launch --use_deepspeed ...`, the config's `deepspeed_config:`), read by
# accel_deepspeed's DeepSpeedPlugin for the fields a script leaves unset.
GRADIENT_CLIPPING = "ACCEL_GRADIENT_CLIPPING"
DEEPSPEED_CONFIG_FILE = "ACCEL_DEEPSPEED_CONFIG_FILE"
DEEPSPEED_ZERO_STAGE = "ACCEL_DEEPSPEED_ZERO_STAGE"
DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE = "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"
DEEPSPEED_OFFLOAD_PARAM_DEVICE = "ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE"
DEEPSPEED_ZERO3_INIT = "ACCEL_DEEPSPEED_ZERO3_INIT"
DEEPSPEED_ZERO3_SAVE_16BIT_MODEL = "ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"
# FSDP options (`accel launch --use_fsdp ...`, the config's `fsdp_config:`), read by
# FullyShardedDataParallelPlugin for the fields a script leaves unset.
FSDP_VERSION = "ACCEL_FSDP_VERSION"
FSDP_AUTO_WRAP_POLICY = "ACCEL_FSDP_AUTO_WRAP_POLICY"
FSDP_TRANSFORMER_CLS_TO_WRAP = "ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP"
FSDP_MIN_NUM_PARAMS = "ACCEL_FSDP_MIN_NUM_PARAMS"
FSDP_RESHARD_AFTER_FORWARD = "ACCEL_FSDP_RESHARD_AFTER_FORWARD"
FSDP_STATE_DICT_TYPE = "ACCEL_FSDP_STATE_DICT_TYPE"
FSDP_CPU_RAM_EFFICIENT_LOADING = "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING"
FSDP_ACTIVATION_CHECKPOINTING = "ACCEL_FSDP_ACTIVATION_CHECKPOINTING"
FSDP_OFFLOAD_PARAMS = "ACCEL_FSDP_OFFLOAD_PARAMS"
FSDP_SHARDING_STRATEGY = "ACCEL_FSDP_SHARDING_STRATEGY"
# PyTorch/XLA's own: the runtime's device kind (TPU, CPU, CUDA); set means an XLA run (with torch_xla).
PJRT_DEVICE = "PJRT_DEVICE"
# PyTorch/XLA's own: how many replicas (threads of one process) its CPU device runs.
CPU_NUM_DEVICES = "CPU_NUM_DEVICES"
# DeepSpeed's own: which accelerator it drives ("cpu" on a machine without GPUs).
DS_ACCELERATOR = "DS_ACCELERATOR"
# Set by the user, read by the library alone: "0" skips the cross-rank check of inputs before
# gather/broadcast/reduce (on by default; debug mode checks anyway).
CHECK_COLLECTIVES = "ACCEL_CHECK_COLLECTIVES"
# Set by the user: the level (DEBUG, INFO, WARNING, ERROR, CRITICAL) of the loggers that
# `accel.logging.get_logger` returns when it is given none.
LOG_LEVEL = "ACCEL_LOG_LEVEL"
# Set by the user: "0" turns off the progress bar a long save_state/load_state shows on a terminal.
PROGRESS = "ACCEL_PROGRESS"
# Set by `accel launch` so that a script can tell it was started by us.
LAUNCHED = "ACCEL_LAUNCHED"
# Set by `accel launch`: the per-job folder where each rank writes its diagnosis report (its stacks and
# last collectives) when the launcher asks, and its heartbeat (accel_state.process_group.diagnosis).
DIAGNOSIS_DIR = "ACCEL_DIAGNOSIS_DIR"
# `accel launch --hang_timeout S` (config key `hang_timeout`): seconds without progress on any rank
# (no collective entered or left, no optimizer step) after which the launcher diagnoses and stops the job.
HANG_TIMEOUT = "ACCEL_HANG_TIMEOUT"

# Where the config file is looked for.
CONFIG_FILE = "ACCEL_CONFIG_FILE"
HOME = "ACCEL_HOME"

# torchrun's standard variables, read by the state and written by the launcher.
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
# Set by torchrun's elastic agent in every worker.
RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"  # how many times the worker group was restarted
USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"  # "True" when the agent hosts the TCPStore

# Every ACCEL_* variable of accel, whichever package reads it: the adapters (accel_deepspeed,
# accel_xla) name theirs here too, so that one not listed is a mistake (a test keeps it so).
KNOWN_ACCEL_VARIABLES: frozenset[str] = frozenset(
    value
    for name, value in dict(globals()).items()
    if name.isupper() and isinstance(value, str) and value.startswith("ACCEL_")
)

_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off", ""}


class EnvVarError(ValueError):
    """An environment variable holds a value the library cannot use."""


class UnknownEnvVarWarning(UserWarning):
    """An ACCEL_* environment variable is set that accel does not read (a misspelt name?)."""


def unknown_variable_messages(environ: Mapping[str, str], where: str = "environment variable") -> list[str]:
    """Return one line per ACCEL_* name of `environ` that accel does not know, with the closest known name."""
    messages = []
    for name in sorted(environ):
        if not name.startswith("ACCEL_") or name in KNOWN_ACCEL_VARIABLES:
            continue
        close = difflib.get_close_matches(name, sorted(KNOWN_ACCEL_VARIABLES), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        messages.append(f"{where} {name} is not one accel reads; it is ignored{hint}")
    return messages


_warned_unknown = False


def warn_unknown_variables() -> None:
    """Warn (UnknownEnvVarWarning) once per process about ACCEL_* variables accel does not know.

    Silent in a job of `accel launch`, which warned before starting the ranks, and on ranks other
    than 0 of another launcher, so that a job warns once, not once per rank.
    """
    global _warned_unknown
    if _warned_unknown:
        return
    _warned_unknown = True
    if os.environ.get(LAUNCHED) or os.environ.get(RANK, "0").strip() not in ("", "0"):
        return
    messages = unknown_variable_messages(os.environ)
    if not messages:
        return
    # Point at the script's line that built the state, not at accel's own frames.
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith("accel"):
        frame, level = frame.f_back, level + 1
    for message in messages:
        warnings.warn(message, UnknownEnvVarWarning, stacklevel=level)


def read_flag(name: str, default: bool = False) -> bool:
    """Return the boolean value of env var `name`; a value that is not a boolean word is an error."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise EnvVarError(f"environment variable {name}={raw!r} is not a boolean (use 1/0, true/false)")


def read_int(name: str, default: int | None = None, *, minimum: int | None = None) -> int | None:
    """Return the integer value of env var `name`, or `default` when it is unset.

    A value below `minimum` is an error naming the variable, as a value that is not an integer is.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvVarError(f"environment variable {name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise EnvVarError(f"environment variable {name}={raw!r} must be at least {minimum}")
    return value


def read_float(name: str, default: float | None = None) -> float | None:
    """Return the float value of env var `name`, or `default` when it is unset."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise EnvVarError(f"environment variable {name}={raw!r} is not a number") from None


def read_str(name: str, default: str | None = None) -> str | None:
    """Return the value of env var `name`, or `default` when unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip()


@contextlib.contextmanager
def patched(env: Mapping[str, str]) -> Iterator[None]:
    """Set `env` in os.environ for the block (processes forked inside inherit it), then restore
    every variable as it was, unset ones unset."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
