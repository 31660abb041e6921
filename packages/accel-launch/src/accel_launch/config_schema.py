"""The keys of a config file (Accelerate's `default_config.yaml` keys), each with its type and checks.

A small table rather than a class per section: the CLI builds one flag per scalar key from it, the
loader checks a file against it, and `accel config show` lists it. No yaml, no torch: the values come
from accel_state.environment.choices, which the launcher and the library share.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_state.environment.choices import (
    CONFIG_DISTRIBUTED_TYPES,
    CONFIG_MIXED_PRECISION_CHOICES,
    DEEPSPEED_OFFLOAD_DEVICES,
    FSDP_AUTO_WRAP_POLICIES,
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
    ZERO_STAGES,
)

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
    choices: tuple[str, ...] = ()  # for "choice"; for "int", the allowed values written as strings
    minimum: int | None = None
    aliases: tuple[str, ...] = ()  # extra flag names, e.g. Accelerate's `--cpu` for `use_cpu`
    flag: bool = True  # False for a key that has no flag of its own

    @property
    def has_flag(self) -> bool:
        return self.flag and self.kind not in ("dict", "list")


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
    ConfigKey("deepspeed_config", "dict", None, "DeepSpeed section (its keys below)."),
    ConfigKey("fsdp_config", "dict", None, "FSDP section (its keys below)."),
    ConfigKey("megatron_lm_config", "dict", None, "Megatron-LM section (not supported)."),
    ConfigKey("dynamo_config", "dict", None, "torch.compile section (passed on as dynamo_backend)."),
    ConfigKey("ipex_config", "dict", None, "Intel extension section (not supported)."),
    ConfigKey("mpirun_config", "dict", None, "mpirun section (not supported)."),
    ConfigKey("fp8_config", "dict", None, "FP8 section (later issue)."),
    ConfigKey("parallelism_config", "dict", None, "Parallelism section (later issue)."),
    ConfigKey("tp_config", "dict", None, "Tensor-parallel section (not supported)."),
)
KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}

DEEPSPEED_SECTION = "deepspeed_config"
# Accelerate's `deepspeed_config:` keys. Those with a flag take a value, as in Accelerate
# (`--zero3_init_flag true`), and are refused without DeepSpeed.
_DEEPSPEED_KEYS = (
    ConfigKey("deepspeed_config_file", "str", None, "DeepSpeed JSON config file (DeepSpeed only)."),
    ConfigKey(
        "zero_stage",
        "int",
        None,
        "ZeRO stage, 0 to 3 (DeepSpeed only).",
        tuple(str(stage) for stage in ZERO_STAGES),
    ),
    ConfigKey(
        "offload_optimizer_device",
        "choice",
        None,
        "Where ZeRO offloads optimizer states (DeepSpeed only).",
        DEEPSPEED_OFFLOAD_DEVICES,
    ),
    ConfigKey(
        "offload_param_device",
        "choice",
        None,
        "Where ZeRO-3 offloads parameters (DeepSpeed only).",
        DEEPSPEED_OFFLOAD_DEVICES,
    ),
    ConfigKey("offload_optimizer_nvme_path", "str", None, "NVMe folder for optimizer offload.", flag=False),
    ConfigKey("offload_param_nvme_path", "str", None, "NVMe folder for parameter offload.", flag=False),
    ConfigKey(
        "gradient_accumulation_steps",
        "int",
        None,
        "Used when the top-level key is not set.",
        minimum=1,
        flag=False,
    ),
    ConfigKey("gradient_clipping", "float", None, "Clip gradients to this norm (DeepSpeed only).", minimum=0),
    ConfigKey("zero3_init_flag", "bool", None, "Build models sharded, with deepspeed.zero.Init (ZeRO-3)."),
    ConfigKey("zero3_save_16bit_model", "bool", None, "Save ZeRO-3 models as one 16-bit state dict."),
    ConfigKey(
        "deepspeed_multinode_launcher",
        "str",
        None,
        "Only 'standard': accel starts every machine through torch's elastic agent.",
    ),
)
DEEPSPEED_KEYS: dict[str, ConfigKey] = {key.name: key for key in _DEEPSPEED_KEYS}

FSDP_SECTION = "fsdp_config"
# Accelerate's `fsdp_config:` keys for FSDP2 (`fully_shard`); each flag takes a value, as in
# Accelerate (`--fsdp_offload_params true`), and is refused without FSDP.
_FSDP_KEYS = (
    ConfigKey(
        "fsdp_version", "int", None, "FSDP version: 2 (fully_shard); FSDP1 is not supported.", ("1", "2")
    ),
    ConfigKey(
        "fsdp_auto_wrap_policy",
        "choice",
        None,
        "Which submodules FSDP shards on their own.",
        FSDP_AUTO_WRAP_POLICIES,
    ),
    ConfigKey(
        "fsdp_transformer_layer_cls_to_wrap",
        "str",
        None,
        "Class names (comma-separated) of the layers TRANSFORMER_BASED_WRAP shards.",
    ),
    ConfigKey(
        "fsdp_min_num_params",
        "int",
        None,
        "Parameters above which SIZE_BASED_WRAP shards a module.",
        minimum=0,
    ),
    ConfigKey("fsdp_reshard_after_forward", "bool", None, "Free the gathered parameters after forward."),
    ConfigKey(
        "fsdp_state_dict_type",
        "choice",
        None,
        "How save_state writes models and optimizers.",
        FSDP_STATE_DICT_TYPES,
    ),
    ConfigKey(
        "fsdp_cpu_ram_efficient_loading",
        "bool",
        None,
        "Only the main process loads the weights; others may hold none.",
    ),
    ConfigKey(
        "fsdp_activation_checkpointing",
        "bool",
        None,
        "Recompute the sharded layers' activations in backward.",
    ),
    ConfigKey(
        "fsdp_offload_params",
        "bool",
        None,
        "Offload parameters, gradients and optimizer states to the CPU (GPU runs).",
    ),
    ConfigKey(
        "fsdp_sharding_strategy",
        "choice",
        None,
        "FSDP1's strategy, run by FSDP2: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (or 1-5).",
        (*FSDP_SHARDING_STRATEGIES, "1", "2", "3", "4", "5"),
    ),
)
FSDP_KEYS: dict[str, ConfigKey] = {key.name: key for key in _FSDP_KEYS}
# The sections of a file whose keys are typed; the other mappings are passed over unchecked.
SECTIONS: dict[str, dict[str, ConfigKey]] = {DEEPSPEED_SECTION: DEEPSPEED_KEYS, FSDP_SECTION: FSDP_KEYS}
# The keys Accelerate writes in the sections accel reads little or nothing of (dynamo_config
# gives dynamo_backend only), and those of the typed sections accel passes over: known, so that a
# misspelt key is refused with the closest name, while their values are left as they are.
PASSED_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "dynamo_config": (
        "dynamo_backend",
        "dynamo_mode",
        "dynamo_use_fullgraph",
        "dynamo_use_dynamic",
        "dynamo_use_regional_compilation",
    ),
    "megatron_lm_config": tuple(
        f"megatron_lm_{name}"
        for name in (
            "tp_degree",
            "pp_degree",
            "num_micro_batches",
            "sequence_parallelism",
            "recompute_activations",
            "use_distributed_optimizer",
            "gradient_clipping",
        )
    ),
    "ipex_config": ("ipex", "use_xpu"),
    "mpirun_config": ("mpirun_hostfile", "mpirun_ccl"),
    # `accelerate config` writes the long names, `accelerate launch --fp8_*` the short ones.
    "fp8_config": (
        "backend",
        "use_autocast_during_eval",
        "margin",
        "interval",
        "fp8_format",
        "amax_history_length",
        "amax_history_len",
        "amax_compute_algorithm",
        "amax_compute_algo",
        "override_linear_precision",
        "optimization_level",
        "opt_level",
    ),
    "parallelism_config": tuple(
        f"parallelism_config_{name}"
        for name in (
            "dp_replicate_size",
            "dp_shard_size",
            "tp_size",
            "cp_size",
            "cp_comm_strategy",
            "cp_backend",
            "sp_size",
            "sp_backend",
            "sp_seq_length_is_variable",
            "sp_attn_implementation",
        )
    ),
    "tp_config": ("tp_size",),
    # Used by DeepSpeed's own multi-machine launchers, which accel refuses (deepspeed_multinode_launcher).
    DEEPSPEED_SECTION: ("deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter"),
    # FSDP1's keys that FSDP2 already honours whatever their value
    # (accel_state.backends.fsdp.fsdp1_options says why).
    FSDP_SECTION: (
        "fsdp_backward_prefetch",
        "fsdp_forward_prefetch",
        "fsdp_use_orig_params",
        "fsdp_sync_module_states",
    ),
}
# Section keys that are settings under their own name (flag, env var, `config show`), and the
# section each comes from. A section key named like a top-level key (gradient_accumulation_steps)
# is not: it is the top-level key's fallback.
SECTION_SETTINGS: dict[str, ConfigKey] = {
    name: key for keys in SECTIONS.values() for name, key in keys.items() if name not in KEYS
}
SECTION_OF: dict[str, str] = {
    name: section for section, keys in SECTIONS.items() for name in keys if name in SECTION_SETTINGS
}
# Every setting an effective config holds: the top-level keys, then the section settings.
SETTINGS: dict[str, ConfigKey] = {**KEYS, **SECTION_SETTINGS}

_TYPE_WORDS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "dict": "a mapping",
    "list": "a list",
}


def unknown_key_message(name: str, section: str | None = None) -> str:
    """Return "key 'x' is unknown" with a did-you-mean suggestion when one is close.

    In a section the key is named `section.x` and suggestions come from that section's keys.
    """
    known = (
        list(KEYS) if section is None else [*SECTIONS.get(section, {}), *PASSED_SECTION_KEYS.get(section, ())]
    )
    close = difflib.get_close_matches(name, known, n=1)
    prefix = f"{section}." if section is not None else ""
    hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
    return f"key '{prefix}{name}' is unknown{hint}"


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
        if isinstance(value, int) and not isinstance(value, bool) and str(value) in key.choices:
            value = str(value)  # older Accelerate files write `fsdp_sharding_strategy: 1`
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
        if key.choices and str(value) not in key.choices:
            raise ConfigError(f"must be one of {', '.join(key.choices)}, got {value}")
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"must be at least {key.minimum}, got {value}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be {_TYPE_WORDS[kind]}, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"must be a finite number, got {value}")
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"must be at least {key.minimum}, got {value}")
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
        if name in SECTIONS and values[name] is not None:
            values[name] = check_section_values(name, values[name], where)
        elif name in PASSED_SECTION_KEYS and values[name] is not None:
            for key in values[name]:
                if not isinstance(key, str) or key not in PASSED_SECTION_KEYS[name]:
                    raise ConfigError(f"{where}: {unknown_key_message(str(key), name)}")
    return values


def check_section_values(section: str, data: Mapping[Any, Any], where: str) -> dict[str, Any]:
    """Return the checked keys of a typed section; raise ConfigError naming `where` and `section.key`."""
    keys = SECTIONS[section]
    passed = PASSED_SECTION_KEYS.get(section, ())
    values: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(name, str) and name in passed:
            continue
        if not isinstance(name, str) or name not in keys:
            raise ConfigError(f"{where}: {unknown_key_message(str(name), section)}")
        try:
            values[name] = coerce_value(keys[name], value)
        except ConfigError as error:
            raise ConfigError(f"{where}: key '{section}.{name}' {error}") from None
    return values
