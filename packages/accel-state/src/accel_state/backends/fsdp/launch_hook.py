"""The FSDP2 backend's launch hook: `--use_fsdp`, Accelerate's `fsdp_config:` section (each key a
flag taking a value, as `--fsdp_offload_params true`), and the ACCEL_FSDP_* variables the
workers' FullyShardedDataParallelPlugin reads. Its jobs start through torch's elastic agent.
"""

from __future__ import annotations

from accel_state.environment import env_vars
from accel_state.environment.choices import (
    FSDP_AUTO_WRAP_POLICIES,
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
)
from accel_state.seam.launch_hook import ConfigKey, JobConfig, LaunchHook, LaunchHookError, Selector

SECTION = "fsdp_config"
KEYS = (
    ConfigKey(
        "fsdp_version",
        "int",
        None,
        "FSDP version: 2 (fully_shard); FSDP1 is not supported.",
        ("1", "2"),
        env_var=env_vars.FSDP_VERSION,
    ),
    ConfigKey(
        "fsdp_auto_wrap_policy",
        "choice",
        None,
        "Which submodules FSDP shards on their own.",
        FSDP_AUTO_WRAP_POLICIES,
        env_var=env_vars.FSDP_AUTO_WRAP_POLICY,
    ),
    ConfigKey(
        "fsdp_transformer_layer_cls_to_wrap",
        "str",
        None,
        "Class names (comma-separated) of the layers TRANSFORMER_BASED_WRAP shards.",
        env_var=env_vars.FSDP_TRANSFORMER_CLS_TO_WRAP,
    ),
    ConfigKey(
        "fsdp_min_num_params",
        "int",
        None,
        "Parameters above which SIZE_BASED_WRAP shards a module.",
        minimum=0,
        env_var=env_vars.FSDP_MIN_NUM_PARAMS,
    ),
    ConfigKey(
        "fsdp_reshard_after_forward",
        "bool",
        None,
        "Free the gathered parameters after forward.",
        env_var=env_vars.FSDP_RESHARD_AFTER_FORWARD,
    ),
    ConfigKey(
        "fsdp_state_dict_type",
        "choice",
        None,
        "How save_state writes models and optimizers.",
        FSDP_STATE_DICT_TYPES,
        env_var=env_vars.FSDP_STATE_DICT_TYPE,
    ),
    ConfigKey(
        "fsdp_cpu_ram_efficient_loading",
        "bool",
        None,
        "Only the main process loads the weights; others may hold none.",
        env_var=env_vars.FSDP_CPU_RAM_EFFICIENT_LOADING,
    ),
    ConfigKey(
        "fsdp_activation_checkpointing",
        "bool",
        None,
        "Recompute the sharded layers' activations in backward.",
        env_var=env_vars.FSDP_ACTIVATION_CHECKPOINTING,
    ),
    ConfigKey(
        "fsdp_offload_params",
        "bool",
        None,
        "Offload parameters, gradients and optimizer states to the CPU (GPU runs).",
        env_var=env_vars.FSDP_OFFLOAD_PARAMS,
    ),
    ConfigKey(
        "fsdp_sharding_strategy",
        "choice",
        None,
        "FSDP1's strategy, run by FSDP2: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (or 1-5).",
        (*FSDP_SHARDING_STRATEGIES, "1", "2", "3", "4", "5"),
        env_var=env_vars.FSDP_SHARDING_STRATEGY,
    ),
)
# FSDP1's keys that FSDP2 already honours whatever their value (fsdp1_options says why).
PASSED_KEYS = (
    "fsdp_backward_prefetch",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
    "fsdp_sync_module_states",
)


def check_version(config: JobConfig) -> None:
    """Raise LaunchHookError for fsdp_version 1, whatever the job's type (as before the hooks)."""
    if config.given("fsdp_version") == 1:
        raise LaunchHookError(
            f"{config.where('fsdp_version')} is 1: FSDP1 (the FullyShardedDataParallel wrapper) is not "
            "supported; use fsdp_version 2 (fully_shard)"
        )


HOOK = LaunchHook(
    name="FSDP",
    title="FSDP",
    article="an",
    distributed_types=("FSDP",),
    cpu_types=("FSDP",),
    selector=Selector(
        ("use_fsdp",),
        "Run an FSDP2 job (distributed_type FSDP): every model fully sharded across processes.",
    ),
    section=SECTION,
    keys=KEYS,
    passed_keys=PASSED_KEYS,
    check=check_version,
)
