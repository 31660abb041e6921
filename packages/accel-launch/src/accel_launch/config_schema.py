"""The keys of a config file (Accelerate's `default_config.yaml` keys), each with its type and checks.

A small table rather than a class per section: the CLI builds one flag per scalar key from it, the
loader checks a file against it, and `accel config show` lists it. No yaml, no torch: the values come
from accel_state.choices, which the launcher and the library share.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_state.choices import CONFIG_DISTRIBUTED_TYPES, CONFIG_MIXED_PRECISION_CHOICES

COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
RDZV_BACKENDS = ("static", "c10d")


class ConfigError(ValueError):
    """A config value, file or combination that cannot be used; the message is one line naming where."""


@dataclass(frozen=True)
class ConfigKey:
    """One key of the config file: its type, allowed values and default, and whether it has a flag."""

    name: str
    kind: str  # "bool", "int", "float", "str", "choice", "dict", "list"
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    aliases: tuple[str, ...] = ()  # extra flag names, e.g. Accelerate's `--cpu` for `use_cpu`

    @property
    def has_flag(self) -> bool:
        return self.kind not in ("dict", "list")


_KEYS = (
    ConfigKey("compute_environment", "choice", "LOCAL_MACHINE", "Where the job runs.", COMPUTE_ENVIRONMENTS),
    ConfigKey(
        "distributed_type",
        "choice",
        None,
        "Kind of distributed job (inferred when unset).",
        CONFIG_DISTRIBUTED_TYPES,
    ),
    ConfigKey(
        "mixed_precision",
        "choice",
        "no",
        "Mixed precision for the Accelerator.",
        CONFIG_MIXED_PRECISION_CHOICES,
    ),
    ConfigKey(
        "use_cpu", "bool", False, "Train on the CPU even where an accelerator exists.", aliases=("cpu",)
    ),
    ConfigKey(
        "debug",
        "bool",
        False,
        "Check collective shapes across ranks; show the launcher's traceback on its own errors.",
    ),
    ConfigKey("num_processes", "int", 1, "Processes to start on this machine.", minimum=1),
    ConfigKey("num_machines", "int", 1, "Machines taking part in the job.", minimum=1),
    ConfigKey(
        "machine_rank", "int", 0, "Rank of this machine, 0 for the one at --main_process_ip.", minimum=0
    ),
    ConfigKey(
        "main_process_ip",
        "str",
        None,
        "Address of machine 0 (required with several machines; 127.0.0.1 otherwise).",
    ),
    ConfigKey(
        "main_process_port",
        "int",
        None,
        "Rendezvous port on machine 0 (default: a free port on one machine, 29500 on several).",
        minimum=1,
    ),
    ConfigKey("rdzv_backend", "choice", "static", "Rendezvous: static (fixed ranks) or c10d.", RDZV_BACKENDS),
    ConfigKey("same_network", "bool", True, "All machines share one network (informational)."),
    ConfigKey(
        "gpu_ids", "str", "all", "GPUs to use on this machine ('all' or '0,1'); sets CUDA_VISIBLE_DEVICES."
    ),
    ConfigKey(
        "gradient_accumulation_steps", "int", 1, "Batches to accumulate before an optimizer step.", minimum=1
    ),
    ConfigKey("downcast_bf16", "bool", False, "On XLA, downcast float32 to bf16 too (passed on)."),
    ConfigKey("enable_cpu_affinity", "bool", False, "Pin each process to the CPUs near its GPU (passed on)."),
    ConfigKey("main_training_function", "str", "main", "Function a notebook launch calls (informational)."),
    ConfigKey("dynamo_backend", "str", None, "torch.compile backend (older files; prefer dynamo_config)."),
    ConfigKey("tpu_name", "str", None, "TPU pod name (XLA; later)."),
    ConfigKey("tpu_zone", "str", None, "TPU zone (XLA; later)."),
    ConfigKey("tpu_use_cluster", "bool", False, "Run on a TPU pod (XLA; later)."),
    ConfigKey("tpu_use_sudo", "bool", False, "Use sudo on the TPU pod (XLA; later)."),
    ConfigKey("command_file", "str", None, "File of commands to run on a TPU pod (XLA; later)."),
    ConfigKey("commands", "list", None, "Commands to run on a TPU pod (XLA; later)."),
    ConfigKey("tpu_vm", "list", None, "TPU VMs (XLA; later)."),
    ConfigKey("tpu_env", "list", None, "Env vars for a TPU pod (XLA; later)."),
    ConfigKey("deepspeed_config", "dict", None, "DeepSpeed section (later issue)."),
    ConfigKey("fsdp_config", "dict", None, "FSDP section (later issue)."),
    ConfigKey("megatron_lm_config", "dict", None, "Megatron-LM section (not supported)."),
    ConfigKey("dynamo_config", "dict", None, "torch.compile section (passed on as dynamo_backend)."),
    ConfigKey("ipex_config", "dict", None, "Intel extension section (not supported)."),
    ConfigKey("mpirun_config", "dict", None, "mpirun section (not supported)."),
    ConfigKey("fp8_config", "dict", None, "FP8 section (later issue)."),
    ConfigKey("parallelism_config", "dict", None, "Parallelism section (later issue)."),
)
KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}

_TYPE_WORDS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "dict": "a mapping",
    "list": "a list",
}


def unknown_key_message(name: str) -> str:
    """Return "key 'x' is unknown" with a did-you-mean suggestion when one is close."""
    close = difflib.get_close_matches(name, list(KEYS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"key '{name}' is unknown{hint}"


def coerce_value(key: ConfigKey, value: Any) -> Any:
    """Return `value` as the type of `key`; raise ConfigError("must be ..., got ...") otherwise.

    The message names neither file nor flag: the caller adds where the value came from.
    """
    if value is None:
        return None
    kind = key.kind
    if kind == "choice":
        if value is False:
            # YAML 1.1 reads an unquoted `NO` / `no` as false; Accelerate's files quote it, people may not.
            value = "no" if "no" in key.choices else "NO"
        if not isinstance(value, str) or value not in key.choices:
            raise ConfigError(f"must be one of {', '.join(key.choices)}, got {value!r}")
        return value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("no", "false"):
            return False  # Accelerate writes `downcast_bf16: 'no'`
        if isinstance(value, str) and value.lower() in ("yes", "true"):
            return True
        raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"must be at least {key.minimum}, got {value}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
        return float(value)
    if kind == "str":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # `gpu_ids: 3`
        if not isinstance(value, str):
            raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
        return value
    expected = dict if kind == "dict" else list
    if not isinstance(value, expected):
        raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
    return value


def check_file_values(data: Any, where: str) -> dict[str, Any]:
    """Return the checked values of a loaded config file; raise ConfigError naming `where` and the key."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: the file must hold a mapping of keys to values, got {type(data).__name__}"
        )
    values: dict[str, Any] = {}
    for name, value in data.items():
        if not isinstance(name, str) or name not in KEYS:
            raise ConfigError(f"{where}: {unknown_key_message(str(name))}")
        try:
            values[name] = coerce_value(KEYS[name], value)
        except ConfigError as error:
            raise ConfigError(f"{where}: key '{name}' {error}") from None
    return values
