"""The keys of a config file (Accelerate's `default_config.yaml` keys), each with its type and checks.

A small table rather than a class per section: the CLI builds one flag per scalar key from it, the
loader checks a file against it, and `accel config show` lists it. The top-level keys are here;
each engine's section and its keys come from its launch hook (accel_state.seam.launch_hook). No
yaml, no torch: the values come from accel_state.environment.choices, which the launcher and the
library share.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from accel_state.compilation.plugin import MODES as DYNAMO_MODES
from accel_state.environment import env_vars
from accel_state.environment.choices import CONFIG_DISTRIBUTED_TYPES, CONFIG_MIXED_PRECISION_CHOICES
from accel_state.seam.launch_hook import ConfigKey, LaunchHook, LaunchHookError, launch_hooks

COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
RDZV_BACKENDS = ("static", "c10d")
# The launch hooks, native first: each brings its section, its keys and its checks.
HOOKS: dict[str, LaunchHook] = launch_hooks()


class ConfigError(LaunchHookError):
    """A config value, file or combination that cannot be used; the message is one line naming where."""


def _distributed_types() -> tuple[str, ...]:
    # Accelerate's names, and those a hook may bring of its own.
    extra = [kind for hook in HOOKS.values() for kind in hook.distributed_types]
    return (*CONFIG_DISTRIBUTED_TYPES, *(kind for kind in extra if kind not in CONFIG_DISTRIBUTED_TYPES))


_KEYS_BEFORE_SECTIONS = (
    ConfigKey("compute_environment", "choice", "LOCAL_MACHINE", "Where the job runs.", COMPUTE_ENVIRONMENTS),
    ConfigKey(
        "distributed_type",
        "choice",
        None,
        "Kind of distributed job (inferred when unset).",
        _distributed_types(),
    ),
    ConfigKey(
        "mixed_precision",
        "choice",
        "no",
        "Mixed precision for the Accelerator.",
        CONFIG_MIXED_PRECISION_CHOICES,
        env_var=env_vars.MIXED_PRECISION,
    ),
    ConfigKey(
        "use_cpu",
        "bool",
        False,
        "Train on the CPU even where an accelerator exists.",
        aliases=("cpu",),
        env_var=env_vars.USE_CPU,
    ),
    ConfigKey(
        "debug",
        "bool",
        False,
        "Check collective shapes across ranks; show the launcher's traceback on its own errors.",
        env_var=env_vars.DEBUG_MODE,
    ),
    ConfigKey(
        "hang_timeout",
        "float",
        None,
        "Seconds without progress on any rank (no collective entered or left, no optimizer step) after "
        "which every rank's stack and last collectives are printed as one diagnosis and the job is "
        "stopped with a non-zero code; for a stuck data loader or a deadlock outside collectives. "
        "Default: off.",
        minimum=0,
        env_var=env_vars.HANG_TIMEOUT,
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
        "gradient_accumulation_steps",
        "int",
        1,
        "Batches to accumulate before an optimizer step.",
        minimum=1,
        env_var=env_vars.GRADIENT_ACCUMULATION_STEPS,
    ),
    ConfigKey(
        "downcast_bf16",
        "bool",
        False,
        "On TPUs, downcast float32 to bf16 too (passed on).",
        env_var=env_vars.DOWNCAST_BF16,
    ),
    ConfigKey(
        "enable_cpu_affinity",
        "bool",
        False,
        "Pin each process to the CPUs near its GPU (passed on).",
        env_var=env_vars.ENABLE_CPU_AFFINITY,
    ),
    ConfigKey("main_training_function", "str", "main", "Function a notebook launch calls (informational)."),
    ConfigKey(
        "dynamo_backend",
        "str",
        None,
        "torch.compile backend (older files; prefer dynamo_config).",
        env_var=env_vars.DYNAMO_BACKEND,
    ),
    ConfigKey("tpu_name", "str", None, "TPU pod name (not used yet)."),
    ConfigKey("tpu_zone", "str", None, "TPU zone (not used yet)."),
    ConfigKey("tpu_use_cluster", "bool", False, "Run on a TPU pod (not used yet)."),
    ConfigKey("tpu_use_sudo", "bool", False, "Use sudo on the TPU pod (not used yet)."),
    ConfigKey("command_file", "str", None, "File of commands to run on a TPU pod (not used yet)."),
    ConfigKey("commands", "list", None, "Commands to run on a TPU pod (not used yet)."),
    ConfigKey("tpu_vm", "list", None, "TPU VMs (not used yet)."),
    ConfigKey("tpu_env", "list", None, "Env vars for a TPU pod (not used yet)."),
)
# Each hook's section: typed by its keys, or passed over unchecked when the hook is a stand-in.
_SECTION_KEYS = tuple(
    ConfigKey(
        hook.section,
        "dict",
        None,
        f"{hook.title} section (its keys below)." if hook.keys else f"{hook.title} section (passed over).",
    )
    for hook in HOOKS.values()
    if hook.section is not None
)
_KEYS_AFTER_SECTIONS = (
    ConfigKey("megatron_lm_config", "dict", None, "Megatron-LM section (not supported)."),
    ConfigKey("dynamo_config", "dict", None, "torch.compile section (its keys below)."),
    ConfigKey("ipex_config", "dict", None, "Intel extension section (not supported)."),
    ConfigKey("mpirun_config", "dict", None, "mpirun section (not supported)."),
    ConfigKey("fp8_config", "dict", None, "FP8 section (later issue)."),
    ConfigKey("parallelism_config", "dict", None, "N-D parallelism section (its keys below)."),
    ConfigKey("tp_config", "dict", None, "Tensor-parallel section (not supported)."),
)
KEYS: dict[str, ConfigKey] = {
    key.name: key for key in (*_KEYS_BEFORE_SECTIONS, *_SECTION_KEYS, *_KEYS_AFTER_SECTIONS)
}
# N-D parallelism (Accelerate's `parallelism_config`): core config, not an engine's. Its switch has
# no file key of its own: a file's non-empty section turns it on, as in Accelerate.
PARALLELISM_SECTION = "parallelism_config"
PARALLELISM_SWITCH = ConfigKey(
    "use_parallelism_config",
    "bool",
    False,
    "Lay the processes out on an N-D mesh (the --parallelism_config_* sizes); a file's "
    "parallelism_config section turns it on.",
    env_var=env_vars.USE_PARALLELISM_CONFIG,
)
# The mesh's dimensions, in Accelerate's order: their product must be the world size.
PARALLELISM_DIMENSIONS: dict[str, str] = {
    "dp_replicate": env_vars.PARALLELISM_DP_REPLICATE_SIZE,
    "dp_shard": env_vars.PARALLELISM_DP_SHARD_SIZE,
    "tp": env_vars.PARALLELISM_TP_SIZE,
    "cp": env_vars.PARALLELISM_CP_SIZE,
}
_DIMENSION_HELP = {
    "dp_replicate": "Data-parallel replicas (whole copies of the model).",
    "dp_shard": "Data-parallel shards (processes a model's parameters are sharded over).",
    "tp": "Tensor-parallel size (processes each layer is split over).",
    "cp": "Context-parallel size (processes each sequence is split over; needs CUDA).",
}
PARALLELISM_KEYS: dict[str, ConfigKey] = {
    f"parallelism_config_{dimension}_size": ConfigKey(
        f"parallelism_config_{dimension}_size",
        "int",
        1,
        f"{_DIMENSION_HELP[dimension]} With --use_parallelism_config.",
        minimum=1,
        env_var=var,
    )
    for dimension, var in PARALLELISM_DIMENSIONS.items()
}
# torch.compile (Accelerate's `dynamo_config`): the backend is the top-level `dynamo_backend`
# (the section's is its fallback); the other settings are the section's, each with a flag.
DYNAMO_SECTION = "dynamo_config"
DYNAMO_KEYS: dict[str, ConfigKey] = {
    "dynamo_mode": ConfigKey(
        "dynamo_mode", "choice", None, "torch.compile mode (with --dynamo_backend).", DYNAMO_MODES,
        env_var=env_vars.DYNAMO_MODE,
    ),
    "dynamo_use_fullgraph": ConfigKey(
        "dynamo_use_fullgraph", "bool", False, "Compile each model as one graph (a graph break is an error).",
        env_var=env_vars.DYNAMO_USE_FULLGRAPH,
    ),
    "dynamo_use_dynamic": ConfigKey(
        "dynamo_use_dynamic", "bool", False, "Compile for dynamic shapes (fewer recompilations).",
        env_var=env_vars.DYNAMO_USE_DYNAMIC,
    ),
    "dynamo_use_regional_compilation": ConfigKey(
        "dynamo_use_regional_compilation", "bool", False,
        "Compile each repeated block once, in place (much faster compilation).",
        env_var=env_vars.DYNAMO_USE_REGIONAL_COMPILATION,
    ),
}  # fmt: skip


def dynamo_variables(config: Any) -> dict[str, str]:
    """Return the ACCEL_DYNAMO_* variables of the torch.compile settings `config` was given."""
    variables = {}
    for name, key in DYNAMO_KEYS.items():
        value = config.given(name)
        if value is not None and key.env_var is not None:
            variables[key.env_var] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return variables


# The sections of a file whose keys are typed; the other mappings are passed over unchecked.
SECTIONS: dict[str, dict[str, ConfigKey]] = {
    PARALLELISM_SECTION: PARALLELISM_KEYS,
    DYNAMO_SECTION: {
        **DYNAMO_KEYS,
        "dynamo_backend": ConfigKey("dynamo_backend", "str", None, "torch.compile backend.", flag=False),
    },
    **{
        hook.section: {key.name: key for key in hook.keys}
        for hook in HOOKS.values()
        if hook.section is not None and hook.keys
    },
}
# The sections of adapters that are not installed: their keys cannot be checked, so a file that
# sets any is refused with the install line rather than passed over unchecked.
STAND_IN_SECTIONS: dict[str, LaunchHook] = {
    hook.section: hook for hook in HOOKS.values() if hook.section is not None and hook.stand_in
}
# Every hook's section, typed or not: listed under its keys' own names, never as a mapping.
HOOK_SECTIONS: tuple[str, ...] = tuple(key.name for key in _SECTION_KEYS)
# The keys Accelerate writes in the sections accel reads nothing of, and those of the typed sections
# accel passes over: known, so that a misspelt key is refused with the closest name, while their
# values are left as they are.
PASSED_SECTION_KEYS: dict[str, tuple[str, ...]] = {
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
    # The sizes are typed (PARALLELISM_KEYS); these Accelerate keys are known but not read yet.
    "parallelism_config": tuple(
        f"parallelism_config_{name}"
        for name in (
            "cp_comm_strategy",
            "cp_backend",
            "sp_size",
            "sp_backend",
            "sp_seq_length_is_variable",
            "sp_attn_implementation",
        )
    ),
    "tp_config": ("tp_size",),
    **{hook.section: hook.passed_keys for hook in HOOKS.values() if hook.section and hook.passed_keys},
}
# Section keys that are settings under their own name (flag, env var, `config show`), the section
# each comes from and the hook it belongs to. A section key that is a top-level key's fallback
# (`ConfigKey.top_level`) is not.
# The parallelism sizes come first and belong to no hook.
SECTION_SETTINGS: dict[str, ConfigKey] = {
    **PARALLELISM_KEYS,
    **DYNAMO_KEYS,
    **{key.name: key for hook in HOOKS.values() for key in hook.settings_keys if key.name not in KEYS},
}
SECTION_OF: dict[str, str] = {
    **dict.fromkeys(PARALLELISM_KEYS, PARALLELISM_SECTION),
    **dict.fromkeys(DYNAMO_KEYS, DYNAMO_SECTION),
    **{
        key.name: str(hook.section)
        for hook in HOOKS.values()
        for key in hook.settings_keys
        if key.name in SECTION_SETTINGS and key.name not in PARALLELISM_KEYS and key.name not in DYNAMO_KEYS
    },
}
HOOK_OF: dict[str, LaunchHook] = {
    key.name: hook
    for hook in HOOKS.values()
    for key in hook.settings_keys
    if key.name in SECTION_SETTINGS and key.name not in PARALLELISM_KEYS and key.name not in DYNAMO_KEYS
}
# Settings a file sets only through a section's presence: name -> that section.
IMPLIED_BY_SECTION: dict[str, str] = {PARALLELISM_SWITCH.name: PARALLELISM_SECTION}
# Every setting an effective config holds: the top-level keys, the switches a section implies,
# then the section settings.
SETTINGS: dict[str, ConfigKey] = {**KEYS, PARALLELISM_SWITCH.name: PARALLELISM_SWITCH, **SECTION_SETTINGS}

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
            value = str(value)  # older Accelerate files write numbered choices (`..._strategy: 1`)
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
        elif name in STAND_IN_SECTIONS and values[name]:
            hook = STAND_IN_SECTIONS[name]
            raise ConfigError(
                f"{where}: section '{name}' is read by the {hook.title} adapter, which is not installed, "
                f"so its keys cannot be checked. {hook.install_hint}"
            )
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
