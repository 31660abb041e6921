"""The option values the launcher offers and the library accepts, defined once for both.

Like env_vars, this module imports nothing heavy: the CLI reads it without torch.
"""

from __future__ import annotations

from accel_state.environment.distributed_type import DistributedType

# torchrun's rendezvous port when none is given (the launcher's multi-machine default).
DEFAULT_MASTER_PORT = 29500

# Mixed-precision modes accel runs.
MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")
# Also accepted in a config file and by `--mixed_precision` (Accelerate's values), refused at launch.
CONFIG_MIXED_PRECISION_CHOICES = (*MIXED_PRECISION_CHOICES, "fp8")

# Level names ACCEL_LOG_LEVEL takes (any case), those of the standard `logging` module.
LOG_LEVEL_CHOICES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Distributed types `accel launch` can start (and `accel config` offers). DEEPSPEED needs the
# accel-deepspeed adapter in the workers; the launcher starts it through torch's elastic agent too.
LAUNCHABLE_DISTRIBUTED_TYPES = tuple(
    kind.value
    for kind in (
        DistributedType.NO,
        DistributedType.MULTI_CPU,
        DistributedType.MULTI_GPU,
        DistributedType.DEEPSPEED,
        DistributedType.FSDP,
    )
)
# Those a job may run on the CPU with (DeepSpeed has a CPU accelerator).
CPU_DISTRIBUTED_TYPES = (
    DistributedType.NO.value,
    DistributedType.MULTI_CPU.value,
    DistributedType.DEEPSPEED.value,
    DistributedType.FSDP.value,
)
# Every value of Accelerate's `distributed_type` key, accepted in a config file: each member of the
# enum, which holds all of Accelerate's.
CONFIG_DISTRIBUTED_TYPES = tuple(kind.value for kind in DistributedType)

# DeepSpeed: the ZeRO stages and where ZeRO may offload optimizer states and parameters.
ZERO_STAGES = (0, 1, 2, 3)
DEEPSPEED_OFFLOAD_DEVICES = ("none", "cpu", "nvme")

# FSDP (version 2, `fully_shard`): the auto-wrap policies and state dict types, Accelerate's names.
FSDP_VERSIONS = (2,)
FSDP_AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
FSDP_STATE_DICT_TYPES = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
# FSDP1's sharding strategies (Accelerate's `fsdp_sharding_strategy`), in ShardingStrategy's order:
# older Accelerate config files write their numbers 1-5. The FSDP backend's fsdp1_options maps them
# onto FSDP2.
FSDP_SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
