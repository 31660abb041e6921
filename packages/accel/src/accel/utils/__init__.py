"""`accel.utils`: Accelerate's utility names, each the object of the package that holds its concept.

Imported only when a script imports it (`import accel` does not), so the probes and helpers here
cost nothing to a script that does not use them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from accel.adapter_names import adapter_name
from accel.dataloader_config import DataLoaderConfiguration
from accel.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from accel.project_config import ProjectConfiguration
from accel.tracking import LoggerType
from accel_data.rng_sync import synchronize_rng_states
from accel_state import (
    DDPCommunicationHookType,
    DistributedOperationException,
    DistributedType,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    KwargsHandler,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    find_executable_batch_size,
    gather,
    gather_object,
    pad_across_processes,
    recursively_apply,
    release_memory,
    send_to_device,
    set_seed,
)
from accel_state import reduce as _reduce
from accel_state.environment import env_vars
from accel_state.environment.availability import (
    check_cuda_fp8_capability,
    compare_versions,
    is_4bit_bnb_available,
    is_8bit_bnb_available,
    is_aim_available,
    is_bf16_available,
    is_bnb_available,
    is_boto3_available,
    is_ccl_available,
    is_clearml_available,
    is_comet_ml_available,
    is_cuda_available,
    is_datasets_available,
    is_deepspeed_available,
    is_dvclive_available,
    is_fp8_available,
    is_fp16_available,
    is_habana_gaudi1,
    is_hpu_available,
    is_import_timer_available,
    is_ipex_available,
    is_lomo_available,
    is_matplotlib_available,
    is_megatron_lm_available,
    is_mlflow_available,
    is_mlu_available,
    is_mpi_available,
    is_mps_available,
    is_msamp_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_pandas_available,
    is_peft_available,
    is_pippy_available,
    is_pynvml_available,
    is_pytest_available,
    is_rich_available,
    is_rocm_available,
    is_safetensors_available,
    is_sagemaker_available,
    is_schedulefree_available,
    is_sdaa_available,
    is_swanlab_available,
    is_tensorboard_available,
    is_timm_available,
    is_torch_distributed_available,
    is_torch_tensorrt_available,
    is_torch_version,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_available,
    is_torchdata_stateful_dataloader_available,
    is_torchvision_available,
    is_tqdm_available,
    is_trackio_available,
    is_transformer_engine_available,
    is_transformers_available,
    is_triton_available,
    is_wandb_available,
    is_weights_only_available,
    is_xccl_available,
    is_xpu_available,
)


def patch_environment(**kwargs: Any) -> contextlib.AbstractContextManager[None]:
    """Set environment variables (names upper-cased, values as strings) inside the block, then
    restore what was there before (Accelerate's helper)."""
    return env_vars.patched({key.upper(): str(value) for key, value in kwargs.items()})


_TRUE_WORDS = ("y", "yes", "t", "true", "on", "1")
_FALSE_WORDS = ("n", "no", "f", "false", "off", "0")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """Return 1 for a yes-word (`y`, `yes`, `t`, `true`, `on`, `1`) and 0 for a no-word, as bools
    with `to_bool` (Accelerate's helper for flags read from the environment)."""
    word = str(value).strip().lower()
    if word in _TRUE_WORDS:
        return True if to_bool else 1
    if word in _FALSE_WORDS:
        return False if to_bool else 0
    raise ValueError(f"str_to_bool: {value!r} is neither a yes-word ({', '.join(_TRUE_WORDS)}) nor a no-word")


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Return the element-wise mean (or `reduction="sum"`) over ranks of every tensor, times `scale`.

    Accelerate's `utils.reduce` averages by default while `Accelerator.reduce` sums; this keeps
    both defaults. The work is `accel_state.reduce`'s.
    """
    return _reduce(tensor, reduction=reduction, scale=scale)


__all__ = [
    "DataLoaderConfiguration",
    "DistributedOperationException",
    "DistributedType",
    "ProjectConfiguration",
    "broadcast",
    "broadcast_object_list",
    "check_cuda_fp8_capability",
    "compare_versions",
    "copy_tensor_to_devices",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "is_4bit_bnb_available",
    "is_8bit_bnb_available",
    "is_aim_available",
    "is_bf16_available",
    "is_bnb_available",
    "is_boto3_available",
    "is_ccl_available",
    "is_clearml_available",
    "is_comet_ml_available",
    "is_cuda_available",
    "is_datasets_available",
    "is_deepspeed_available",
    "is_dvclive_available",
    "is_fp16_available",
    "is_fp8_available",
    "is_habana_gaudi1",
    "is_hpu_available",
    "is_import_timer_available",
    "is_ipex_available",
    "is_lomo_available",
    "is_matplotlib_available",
    "is_megatron_lm_available",
    "is_mlflow_available",
    "is_mlu_available",
    "is_mpi_available",
    "is_mps_available",
    "is_msamp_available",
    "is_musa_available",
    "is_neuron_available",
    "is_npu_available",
    "is_pandas_available",
    "is_peft_available",
    "is_pippy_available",
    "is_pynvml_available",
    "is_pytest_available",
    "is_rich_available",
    "is_rocm_available",
    "is_safetensors_available",
    "is_sagemaker_available",
    "is_schedulefree_available",
    "is_sdaa_available",
    "is_swanlab_available",
    "is_tensorboard_available",
    "is_timm_available",
    "is_torch_distributed_available",
    "is_torch_tensorrt_available",
    "is_torch_version",
    "is_torch_xla_available",
    "is_torchao_available",
    "is_torchdata_available",
    "is_torchdata_stateful_dataloader_available",
    "is_torchvision_available",
    "is_tqdm_available",
    "is_trackio_available",
    "is_transformer_engine_available",
    "is_transformers_available",
    "is_triton_available",
    "is_wandb_available",
    "is_weights_only_available",
    "is_xccl_available",
    "is_xpu_available",
    "pad_across_processes",
    "patch_environment",
    "recursively_apply",
    "reduce",
    "release_memory",
    "send_to_device",
    "set_seed",
    "str_to_bool",
    "synchronize_rng_states",
    # Handlers and plugins (Accelerate keeps them in accelerate.utils too)
    "AutocastKwargs",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "ProfileKwargs",
]


def __getattr__(name: str) -> Any:
    # DeepSpeedPlugin, DummyOptim, DummyScheduler: from accel-deepspeed, on first use.
    return adapter_name(name, __name__)
