"""Accelerate's FSDP1-era arguments of `FullyShardedDataParallelPlugin`, translated to FSDP2.

Scripts written for Accelerate's FSDP1 plugin pass `sharding_strategy`, `state_dict_config`,
`backward_prefetch`, `use_orig_params`, ... `fully_shard` has none of them. Each is mapped onto
what FSDP2 does with the same meaning:

- `sharding_strategy`: FULL_SHARD and SHARD_GRAD_OP are `reshard_after_forward` True and False;
  NO_SHARD shards over a mesh of one process per shard group (every rank keeps whole parameters,
  gradients are all-reduced, as DDP does); HYBRID_SHARD (and HYBRID_SHARD_ZERO2) shards inside each
  node and replicates across nodes (a 2-D mesh).
- `state_dict_config` / `optim_state_dict_config`: a Full...Config picks FULL_STATE_DICT, its
  `offload_to_cpu` and `rank0_only` say where the gathered state dict lives; a Sharded...Config
  picks SHARDED_STATE_DICT. FSDP1's LOCAL_STATE_DICT (flat parameters) has no FSDP2 form.
- `mixed_precision_policy` as FSDP1's `MixedPrecision` (or Accelerate's dict of dtypes) becomes a
  `MixedPrecisionPolicy` with the same parameter and reduction dtypes.
- `ignored_modules` (modules, or a regex of module names) become `fully_shard`'s `ignored_params`.

Accepted without effect, because FSDP2 already behaves that way whatever their value:
`backward_prefetch` (FSDP2 always all-gathers the next module ahead in backward, FSDP1's
BACKWARD_PRE; the other values only traded speed for memory), `forward_prefetch` and
`limit_all_gathers` (FSDP2 schedules its all-gathers on its own streams and limits them without
CPU synchronisation), `use_orig_params` (FSDP2 has no flat parameters: optimizers always step the
original parameters, as DTensors), `sync_module_states` (every rank always starts from the main
process's weights) and `param_init_fn` (a meta-device model is filled from the main process's
weights with `cpu_ram_efficient_loading`). Importing this module imports no torch.
"""

from __future__ import annotations

import warnings
from typing import Any

from accel_state.environment.choices import FSDP_SHARDING_STRATEGIES

SHARDING_STRATEGIES = FSDP_SHARDING_STRATEGIES
FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 = SHARDING_STRATEGIES
# The strategies that make the mesh 2-D (replicas x shards): a ParallelismConfig says that itself.
MESH_SHAPING = (NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2)
# Whether FSDP2 frees the gathered parameters after forward, per strategy.
RESHARD_AFTER_FORWARD = {
    FULL_SHARD: True,
    SHARD_GRAD_OP: False,
    NO_SHARD: False,
    HYBRID_SHARD: True,
    HYBRID_SHARD_ZERO2: False,
}
BACKWARD_PREFETCHES = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
# FSDP1's state dict config classes -> the state dict type each one means.
_STATE_DICT_CONFIGS = {
    "FullStateDictConfig": "FULL_STATE_DICT",
    "ShardedStateDictConfig": "SHARDED_STATE_DICT",
    "LocalStateDictConfig": "LOCAL_STATE_DICT",
}
_OPTIM_STATE_DICT_CONFIGS = {
    "FullOptimStateDictConfig": "FULL_STATE_DICT",
    "ShardedOptimStateDictConfig": "SHARDED_STATE_DICT",
    "LocalOptimStateDictConfig": "LOCAL_STATE_DICT",
}
_DTYPE_WORDS = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
}


class Fsdp1OptionError(ValueError):
    """An FSDP1 argument that FSDP2 cannot honour; the plugin names the argument and where it came from."""


def sharding_strategy_name(value: Any) -> str:
    """Return the FSDP1 sharding strategy `value` names (a ShardingStrategy, its name, or its
    number 1-5) as one of SHARDING_STRATEGIES."""
    if isinstance(value, bool):
        raise Fsdp1OptionError("is not a sharding strategy")
    word = str(getattr(value, "name", value)).strip().upper().lstrip("_")
    if word.isdigit() and 1 <= int(word) <= len(SHARDING_STRATEGIES):
        return SHARDING_STRATEGIES[int(word) - 1]
    if word not in SHARDING_STRATEGIES:
        raise Fsdp1OptionError(f"is not a sharding strategy; choose one of {', '.join(SHARDING_STRATEGIES)}")
    return word


def backward_prefetch_name(value: Any) -> str:
    """Return the FSDP1 backward prefetch `value` names (a BackwardPrefetch or its name)."""
    word = str(getattr(value, "name", value)).strip().upper()
    if word not in BACKWARD_PREFETCHES:
        raise Fsdp1OptionError(f"is not a backward prefetch; choose one of {', '.join(BACKWARD_PREFETCHES)}")
    return word


def state_dict_config_kind(config: Any, optimizer: bool) -> tuple[str, bool, bool]:
    """Return (state dict type, offload_to_cpu, rank0_only) of an FSDP1 (optimizer) state dict config."""
    kinds = _OPTIM_STATE_DICT_CONFIGS if optimizer else _STATE_DICT_CONFIGS
    kind = kinds.get(type(config).__name__)
    if kind is None:
        raise Fsdp1OptionError(f"is not one of torch's {', '.join(kinds)}")
    if kind == "LOCAL_STATE_DICT":
        raise Fsdp1OptionError(
            "is FSDP1's LOCAL_STATE_DICT (flat parameters), which FSDP2 does not have; use "
            "FullStateDictConfig or ShardedStateDictConfig"
        )
    return kind, bool(getattr(config, "offload_to_cpu", False)), bool(getattr(config, "rank0_only", False))


def _dtype(value: Any) -> Any:
    import torch

    if value is None or isinstance(value, torch.dtype):
        return value
    name = _DTYPE_WORDS.get(str(value).strip().lower())
    if name is None:
        raise Fsdp1OptionError(f"names a dtype {value!r} that is none of {', '.join(_DTYPE_WORDS)}")
    return getattr(torch, name)


def fsdp2_mixed_precision(policy: Any) -> Any:
    """Return `policy` (an FSDP2 MixedPrecisionPolicy, FSDP1's MixedPrecision, or a dict of their
    fields) as a MixedPrecisionPolicy; what FSDP2 cannot do (cast buffers, keep low-precision
    gradients) is said in one warning."""
    if type(policy).__name__ == "MixedPrecisionPolicy":
        return policy
    if isinstance(policy, dict):
        fields = dict(policy)
    elif type(policy).__name__ == "MixedPrecision":
        fields = {name: getattr(policy, name) for name in ("param_dtype", "reduce_dtype", "buffer_dtype")}
        fields["keep_low_precision_grads"] = policy.keep_low_precision_grads
    else:
        raise Fsdp1OptionError(
            "is neither a torch.distributed.fsdp.MixedPrecisionPolicy, FSDP1's MixedPrecision, nor a "
            "dict of dtypes"
        )
    known = {"param_dtype", "reduce_dtype", "buffer_dtype", "output_dtype", "cast_forward_inputs"}
    unknown = sorted(set(fields) - known - {"keep_low_precision_grads"})
    if unknown:
        raise Fsdp1OptionError(f"has keys {', '.join(unknown)}, which are none of {', '.join(sorted(known))}")
    lost = []
    if fields.get("buffer_dtype") is not None:
        lost.append(f"buffer_dtype={fields['buffer_dtype']} (FSDP2 leaves buffers in their own dtype)")
    if fields.get("keep_low_precision_grads"):
        lost.append("keep_low_precision_grads=True (FSDP2 reduces gradients in reduce_dtype)")
    if lost:
        warnings.warn(f"mixed_precision_policy: FSDP2 ignores {'; '.join(lost)}", stacklevel=4)
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(
        param_dtype=_dtype(fields.get("param_dtype")),
        reduce_dtype=_dtype(fields.get("reduce_dtype")),
        output_dtype=_dtype(fields.get("output_dtype")),
        cast_forward_inputs=bool(fields.get("cast_forward_inputs", True)),
    )


def ignored_parameters(model: Any, ignored_modules: Any) -> set[Any]:
    """Return the parameters of `model`'s submodules named by `ignored_modules`: modules, or a
    regex that a submodule's qualified name must match in full."""
    import re

    if ignored_modules is None:
        return set()
    if isinstance(ignored_modules, str):
        pattern = re.compile(ignored_modules)
        modules = [m for name, m in model.named_modules() if name and pattern.fullmatch(name)]
    else:
        modules = list(ignored_modules)
    return {p for module in modules for p in module.parameters()}
