"""Accelerate's module layout: `accel.utils`, `accel.logging`, `accel.local_sgd`, `accel.data_loader`
and `accel.state` hold the split packages' objects, and `import accel` imports none of them. Every
module path of accel's first (flat) layout still imports, with the names it had."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import warnings

import pytest
import torch

import accel_data
import accel_state
import accel_state.parallelism.config
from accel.environment import availability

LAYOUT_MODULES = (
    "accel.utils", "accel.logging", "accel.local_sgd", "accel.data_loader", "accel.state",
    "accel.parallelism_config", "accel.big_modeling", "accel.hooks",
)  # fmt: skip


def test_import_accel_imports_none_of_the_layout_modules():
    watched = (*LAYOUT_MODULES, "accel.environment.availability", "accel.utils.imports")
    code = f"import sys, accel\nprint([m for m in {watched!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_accel_imports_only_its_own_small_modules():
    # `typing` alone took 13 of the 15 ms of `import accel`; torch is imported on first use.
    code = (
        "import sys\nbefore = set(sys.modules)\nimport accel\n"
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith('accel')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("path", ["accel.parallelism_config", "accel.utils", "accel.utils.dataclasses"])
def test_the_mesh_configuration_is_at_accelerates_paths(path):
    module = importlib.import_module(path)
    for name in ("ParallelismConfig", "TorchTensorParallelConfig", "TorchContextParallelConfig"):
        assert getattr(module, name) is getattr(accel_state.parallelism.config, name), f"{path}.{name}"


BIG_MODELING_PATHS = {
    "accel": (
        "init_empty_weights init_on_device cpu_offload cpu_offload_with_hook disk_offload dispatch_model "
        "load_checkpoint_and_dispatch"
    ),
    "accel.big_modeling": (
        "init_empty_weights init_on_device cpu_offload cpu_offload_with_hook disk_offload "
        "dispatch_model load_checkpoint_and_dispatch infer_auto_device_map get_balanced_memory"
    ),
    "accel.hooks": (
        "ModelHook SequentialHook AlignDevicesHook CpuOffload UserCpuOffloadHook add_hook_to_module "
        "remove_hook_from_module remove_hook_from_submodules attach_align_device_hook_on_blocks"
    ),
    "accel.utils": "infer_auto_device_map get_balanced_memory get_max_memory compute_module_sizes "
    "find_tied_parameters load_checkpoint_in_model offload_state_dict OffloadedWeightsLoader "
    "convert_file_size_to_int set_module_tensor_to_device",
}


@pytest.mark.parametrize("path", sorted(BIG_MODELING_PATHS))
def test_big_model_inference_is_at_accelerates_paths_as_accel_big_modelings_objects(path):
    import accel_big_modeling
    import accel_big_modeling.hooks

    module = importlib.import_module(path)
    for name in BIG_MODELING_PATHS[path].split():
        home = accel_big_modeling.hooks if path == "accel.hooks" else accel_big_modeling
        assert getattr(module, name) is getattr(home, name), f"{path}.{name}"


def test_the_layout_modules_import():
    import accel.data_loader
    import accel.local_sgd
    import accel.logging
    import accel.state
    import accel.utils

    for module in (accel.utils, accel.logging, accel.local_sgd, accel.data_loader, accel.state):
        assert all(hasattr(module, name) for name in getattr(module, "__all__", []))


@pytest.mark.parametrize(
    "name",
    [
        "set_seed", "gather", "gather_object", "broadcast", "broadcast_object_list",
        "pad_across_processes", "send_to_device", "find_executable_batch_size", "release_memory",
        "DistributedType", "recursively_apply",
    ],
)  # fmt: skip
def test_utils_names_are_accel_states_objects(name):
    import accel.utils

    assert getattr(accel.utils, name) is getattr(accel_state, name)


def test_utils_configurations_are_the_umbrellas_objects():
    import accel
    import accel.utils

    assert accel.utils.ProjectConfiguration is accel.ProjectConfiguration
    assert accel.utils.DataLoaderConfiguration is accel.DataLoaderConfiguration


def test_utils_probes_are_the_availability_functions_and_tell_the_truth():
    import accel.utils

    probes = [name for name in accel.utils.__all__ if name.startswith("is_")]
    assert len(probes) >= 40
    for name in probes:
        assert getattr(accel.utils, name) is getattr(availability, name)
        arguments = (">=", "2.4") if name == "is_torch_version" else ()  # the one probe with arguments
        assert type(getattr(accel.utils, name)(*arguments)) is bool
    tensorboard = any(importlib.util.find_spec(m) is not None for m in ("tensorboard", "tensorboardX"))
    assert accel.utils.is_tensorboard_available() == tensorboard
    assert accel.utils.is_deepspeed_available() == (importlib.util.find_spec("deepspeed") is not None)
    assert accel.utils.is_wandb_available() == (importlib.util.find_spec("wandb") is not None)
    assert accel.utils.is_cuda_available() == torch.cuda.is_available()


def test_utils_reduce_averages_by_default_like_accelerates():
    import accel.utils

    accel_state.PartialState()
    value = torch.tensor([2.0, 4.0])
    assert torch.equal(accel.utils.reduce(value), value)  # the mean over one process
    assert torch.equal(accel.utils.reduce(value, reduction="sum", scale=0.5), value * 0.5)


def test_find_executable_batch_size_from_utils_halves_on_a_simulated_oom():
    import accel.utils

    tried = []

    @accel.utils.find_executable_batch_size(starting_batch_size=32)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size > 8:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return batch_size

    assert train() == 8 and tried == [32, 16, 8]


def test_logging_and_state_and_data_loader_names_are_the_split_packages_objects():
    import accel.data_loader
    import accel.logging
    import accel.state
    from accel_state.shared_state import process_logging

    assert accel.logging.get_logger is process_logging.get_logger
    assert accel.logging.MultiProcessAdapter is process_logging.MultiProcessAdapter
    for name in ("PartialState", "AcceleratorState", "GradientState", "DistributedType"):
        assert getattr(accel.state, name) is getattr(accel_state, name)
    for name in accel.data_loader.__all__:
        assert getattr(accel.data_loader, name) is getattr(accel_data, name)


def test_local_sgd_does_nothing_on_one_process():
    from accel import Accelerator
    from accel.local_sgd import LocalSGD

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    before = [p.detach().clone() for p in model.parameters()]
    with LocalSGD(accelerator, model, local_sgd_steps=1) as local_sgd:
        assert not local_sgd.enabled
        local_sgd.step()
        assert local_sgd.num_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="local_sgd_steps"):
        LocalSGD(accelerator, model, local_sgd_steps=0)


# Every module of accel before it had folders (commit f4e6744) and the public names it defined; a
# path or name a script may import from. `accel.checkpointing`'s two one-line wrappers (`reshards`,
# `checkpoint_format`) are gone: the backend's attributes say the same.
FLAT_LAYOUT = {
    "accel": (
        "Accelerator AcceleratorState AutocastKwargs BackendNotAvailableError CheckpointError "
        "CheckpointTargetError CheckpointWriteError CollectiveShapeError CollectiveTimeoutError "
        "ConfigError DDPCommunicationHookType DataLoaderConfiguration DispatchError "
        "DistributedDataParallelKwargs DistributedOperationException DistributedType EnvVarError "
        "FsdpConfigError FullyShardedDataParallelPlugin GatherForMetricsError GeneralTracker "
        "GradScalerKwargs GradientAccumulationPlugin GradientState InitProcessGroupKwargs KwargsHandler "
        "LaunchEnvironmentError LaunchOptionsError LoaderStateError LoggerType MixedPrecisionError "
        "NotebookLaunchError PartialState ProfileKwargs ProjectConfiguration RankLeftError ShardingError "
        "TrackerError TrackerNotInstalledError __version__ find_executable_batch_size notebook_launcher "
        "set_seed skip_first_batches"
    ),
    "accel.__about__": "__version__",
    "accel.accelerator": "Accelerator",
    "accel.adapter_names": "ADAPTER_NAMES DEEPSPEED_INSTALL adapter_name",
    "accel.checkpoint_digests": "check_later file_digest",
    "accel.checkpoint_errors": "CheckpointError CheckpointTargetError CheckpointWriteError raise_any_failure",
    "accel.checkpoint_fit": (
        "LAYOUT_KEY check_optimizer_fits check_weights_fit parameter_layout parameter_names"
    ),
    "accel.checkpoint_folder": (
        "PendingFolder abandon_folder agree_on_folder begin_folder commit_folder lock_for_reading "
        "recover_folder"
    ),
    "accel.checkpoint_format": (
        "FORMAT_NAME FORMAT_VERSION METADATA_NAME checkpoint_files member_problem resolved"
    ),
    "accel.checkpoint_layout": "TRAINING_STATE_NAME model_weights suffix write_model",
    "accel.checkpoint_lock": "FolderLock",
    "accel.checkpoint_naming": (
        "CHECKPOINT_FOLDER list_checkpoints load_dir logger project_configuration prune save_dir"
    ),
    "accel.checkpoint_reader": "FolderReader",
    "accel.checkpoint_registry": "CheckpointRegistry LoadHook SaveHook registry_of",
    "accel.checkpoint_restore": (
        "Restore check_fits check_resumable_loaders expect_count files_to_read restore_plan"
    ),
    "accel.checkpoint_rng": "portable_rng_states restore_rng_states rng_states",
    "accel.checkpoint_target": (
        "refuse_foreign_content refuse_unsafe_target removal_problem remove_checkpoint "
        "remove_checkpoint_files remove_if_only_listed"
    ),
    "accel.checkpoint_writer": (
        "FolderWriter write_bytes_file write_safetensors_file write_torch_file writing"
    ),
    "accel.checkpointing": "LAYOUT_KEY TRAINING_STATE_NAME load_state save_state",
    "accel.content_digest": (
        "DIGEST_NAME Digest content_digest digest_of tensor_bytes tensor_digest tensor_path"
    ),
    "accel.content_digest_v1": "DIGEST_NAME content_digest_v1",
    "accel.data_loader": (
        "BatchSamplerShard DataLoaderDispatcher DataLoaderShard IterableDatasetShard "
        "SeedableRandomSampler SkipBatchSampler prepare_data_loader skip_first_batches"
    ),
    "accel.dataloader_config": "DataLoaderConfiguration",
    "accel.diagnostics": (
        "CHECKS check_data_sharding check_device check_gather_and_pad check_mixed_precision_step "
        "check_process_group check_rng_sync check_save_load check_training main run_checks"
    ),
    "accel.experiment_tracking": "ExperimentTracking",
    "accel.explicit_options": "explicit_options",
    "accel.gradient_accumulation": "resolve_accumulation_plugin resolve_accumulation_steps",
    "accel.handler_options": "HANDLER_ATTRIBUTES KwargsHandlers",
    "accel.kwargs_handlers": (
        "AutocastKwargs DistributedDataParallelKwargs GradScalerKwargs InitProcessGroupKwargs ProfileKwargs"
    ),
    "accel.launchers": "notebook_launcher",
    "accel.local_sgd": "LocalSGD",
    "accel.logging": "LoggerStateError MultiProcessAdapter get_logger",
    "accel.metrics": "GatherForMetricsError cut_last_batch gather_for_metrics last_batch_size trim_padding",
    "accel.object_kinds": "DATA_LOADER MODEL OPTIMIZER OTHER SCHEDULER kind_of optimizers_of",
    "accel.process_control": "ProcessControl",
    "accel.profiling": "PROFILE_PATTERN_NAME profile trace_path",
    "accel.project_config": "ProjectConfiguration",
    "accel.state": "AcceleratorState DistributedType GradientState PartialState",
    "accel.testing": "Counter Step all_reduces_per_step regression_loss train_small_regression train_steps",
    "accel.tracker_adapters": (
        "AimTracker ClearMLTracker CometMLTracker DVCLiveTracker MLflowTracker SwanLabTracker TrackioTracker "
        "WandBTracker"
    ),
    "accel.tracker_base": "GeneralTracker TrackerError TrackerNotInstalledError on_main_process",
    "accel.tracking": (
        "AimTracker ClearMLTracker CometMLTracker DVCLiveTracker GeneralTracker JSONL_CONFIG_FILE_NAME "
        "JSONL_FILE_NAME JSONLinesTracker LoggerType MLflowTracker SwanLabTracker TensorBoardTracker "
        "TrackerError TrackerNotInstalledError TrackioTracker WandBTracker build_trackers "
        "get_available_trackers on_main_process resolve_trackers"
    ),
    "accel.training_triggers": "TrainingTriggers",
    "accel.utils": (
        "AutocastKwargs DDPCommunicationHookType DataLoaderConfiguration DistributedDataParallelKwargs "
        "DistributedOperationException DistributedType FullyShardedDataParallelPlugin GradScalerKwargs "
        "GradientAccumulationPlugin InitProcessGroupKwargs KwargsHandler LoggerType ProfileKwargs "
        "ProjectConfiguration broadcast broadcast_object_list check_cuda_fp8_capability compare_versions "
        "copy_tensor_to_devices find_executable_batch_size gather gather_object is_4bit_bnb_available "
        "is_8bit_bnb_available is_aim_available is_bf16_available is_bnb_available is_boto3_available "
        "is_ccl_available is_clearml_available is_comet_ml_available is_cuda_available "
        "is_datasets_available is_deepspeed_available is_dvclive_available is_fp16_available "
        "is_fp8_available is_habana_gaudi1 is_hpu_available is_import_timer_available is_ipex_available "
        "is_lomo_available is_matplotlib_available is_megatron_lm_available is_mlflow_available "
        "is_mlu_available is_mpi_available is_mps_available is_msamp_available is_musa_available "
        "is_neuron_available is_npu_available is_pandas_available is_peft_available is_pippy_available "
        "is_pynvml_available is_pytest_available is_rich_available is_rocm_available "
        "is_safetensors_available is_sagemaker_available is_schedulefree_available is_sdaa_available "
        "is_swanlab_available is_tensorboard_available is_timm_available is_torch_distributed_available "
        "is_torch_tensorrt_available is_torch_version is_torch_xla_available is_torchao_available "
        "is_torchdata_available is_torchdata_stateful_dataloader_available is_torchvision_available "
        "is_tqdm_available is_trackio_available is_transformer_engine_available is_transformers_available "
        "is_triton_available is_wandb_available is_weights_only_available is_xccl_available "
        "is_xpu_available pad_across_processes patch_environment recursively_apply reduce release_memory "
        "send_to_device set_seed str_to_bool synchronize_rng_states"
    ),
    "accel.utils.dataclasses": (
        "AutocastKwargs DDPCommunicationHookType DataLoaderConfiguration DistributedDataParallelKwargs "
        "DistributedType FullyShardedDataParallelPlugin GradScalerKwargs GradientAccumulationPlugin "
        "InitProcessGroupKwargs KwargsHandler LoggerType ProfileKwargs ProjectConfiguration"
    ),
    "accel.utils.operations": (
        "DistributedOperationException broadcast broadcast_object_list convert_to_fp32 "
        "copy_tensor_to_devices gather gather_object pad_across_processes recursively_apply reduce "
        "send_to_device"
    ),
    "accel.weight_files": "flat_tensors parse_size save_model with_aliases",
}


@pytest.mark.parametrize("path", sorted(FLAT_LAYOUT))
def test_every_module_path_of_the_flat_layout_still_imports_with_its_names(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a moved path warns (checked below)
        module = importlib.import_module(path)
    missing = [name for name in FLAT_LAYOUT[path].split() if not hasattr(module, name)]
    assert missing == [], f"{path} lost {missing}"


def test_a_moved_path_is_the_module_at_its_new_home_and_warns_naming_it():
    from accel.old_paths import MOVED

    assert set(MOVED) <= set(FLAT_LAYOUT)
    code = (
        "import importlib, json, warnings, accel\n"
        f"found = {{}}\nfor path in {sorted(FLAT_LAYOUT)!r}:\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(path)\n"
        "    found[path] = [module.__name__, [(str(w.message), w.filename) for w in caught\n"
        "                   if issubclass(w.category, DeprecationWarning)]]\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for path, (name, caught) in json.loads(out).items():
        if path in MOVED:
            assert name == MOVED[path] and importlib.import_module(name).__name__ == name
            # One warning, naming the new path, attributed to the line that imported the old one.
            assert [(f"{path} moved to {name}" in message, filename) for message, filename in caught] == [
                (True, "<string>")
            ], path
        else:
            assert (name, caught) == (path, []), path
