"""Whether each optional package and device kind Accelerate's `utils` asks about is there.

Package probes look the package up (`importlib.util.find_spec` and its installed metadata) and
never import it, so asking costs milliseconds and pulls in nothing heavy. Device probes ask
torch. Every probe returns a plain bool; the names and arguments are Accelerate's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import operator
import os
from collections.abc import Callable
from typing import Any

import torch

# Accelerate's `compare_versions` operators, by their spelling.
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def _installed(module: str, *distributions: str) -> bool:
    """Return whether `module` can be imported and one of `distributions` (default: its own name)
    is installed, so that a stray folder of that name on the path does not count."""
    try:
        if importlib.util.find_spec(module) is None:
            return False
    except (ImportError, ValueError):
        return False
    for distribution in distributions or (module,):
        try:
            importlib.metadata.distribution(distribution)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def _torch_backend(name: str) -> bool:
    """Return whether torch has a device module `name` (torch.npu, torch.xpu, ...) with devices."""
    module = getattr(torch, name, None)
    probe = getattr(module, "is_available", None)
    if probe is None:
        return False
    try:
        return bool(probe())
    except Exception:  # a half-installed vendor extension raises instead of answering
        return False


# Optional packages -------------------------------------------------------------------------
def is_deepspeed_available() -> bool:
    """Return whether deepspeed is installed (looked up, not imported)."""
    return _installed("deepspeed")


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Return whether torch_xla is installed; with `check_is_tpu`/`check_is_gpu`, also whether the
    XLA runtime's device type is that one (read from PJRT_DEVICE, without starting the runtime)."""
    if not _installed("torch_xla", "torch_xla", "torch-xla"):
        return False
    if check_is_tpu or check_is_gpu:
        device = os.environ.get("PJRT_DEVICE", "").upper()
        if check_is_tpu:
            return device == "TPU"
        return device in ("GPU", "CUDA")
    return True


def is_tensorboard_available() -> bool:
    """Return whether tensorboard is installed (looked up, not imported)."""
    return _installed("tensorboard") or _installed("tensorboardX", "tensorboardX")


def is_wandb_available() -> bool:
    """Return whether wandb is installed (looked up, not imported)."""
    return _installed("wandb")


def is_mlflow_available() -> bool:
    """Return whether mlflow is installed (looked up, not imported)."""
    return _installed("mlflow", "mlflow", "mlflow-skinny")


def is_comet_ml_available() -> bool:
    """Return whether comet_ml is installed (looked up, not imported)."""
    return _installed("comet_ml", "comet_ml", "comet-ml")


def is_aim_available() -> bool:
    """Return whether aim is installed (looked up, not imported)."""
    return _installed("aim")


def is_clearml_available() -> bool:
    """Return whether clearml is installed (looked up, not imported)."""
    return _installed("clearml")


def is_dvclive_available() -> bool:
    """Return whether dvclive is installed (looked up, not imported)."""
    return _installed("dvclive")


def is_swanlab_available() -> bool:
    """Return whether swanlab is installed (looked up, not imported)."""
    return _installed("swanlab")


def is_trackio_available() -> bool:
    """Return whether trackio is installed (looked up, not imported)."""
    return _installed("trackio")


def is_rich_available() -> bool:
    """Return whether rich is installed (looked up, not imported)."""
    return _installed("rich")


def is_tqdm_available() -> bool:
    """Return whether tqdm is installed (looked up, not imported)."""
    return _installed("tqdm")


def is_datasets_available() -> bool:
    """Return whether datasets is installed (looked up, not imported)."""
    return _installed("datasets")


def is_transformers_available() -> bool:
    """Return whether transformers is installed (looked up, not imported)."""
    return _installed("transformers")


def is_timm_available() -> bool:
    """Return whether timm is installed (looked up, not imported)."""
    return _installed("timm")


def is_torchvision_available() -> bool:
    """Return whether torchvision is installed (looked up, not imported)."""
    return _installed("torchvision")


def is_pandas_available() -> bool:
    """Return whether pandas is installed (looked up, not imported)."""
    return _installed("pandas")


def is_matplotlib_available() -> bool:
    """Return whether matplotlib is installed (looked up, not imported)."""
    return _installed("matplotlib")


def is_boto3_available() -> bool:
    """Return whether boto3 is installed (looked up, not imported)."""
    return _installed("boto3")


def is_sagemaker_available() -> bool:
    """Return whether sagemaker is installed (looked up, not imported)."""
    return _installed("sagemaker")


def is_pynvml_available() -> bool:
    """Return whether pynvml is installed (looked up, not imported)."""
    return _installed("pynvml", "pynvml", "nvidia-ml-py")


def is_pytest_available() -> bool:
    """Return whether pytest is installed (looked up, not imported)."""
    return _installed("pytest")


def is_torchdata_available() -> bool:
    """Return whether torchdata is installed (looked up, not imported)."""
    return _installed("torchdata")


def is_torchdata_stateful_dataloader_available() -> bool:
    """Return whether torchdata ships `torchdata.stateful_dataloader` (torchdata 0.8 and later)."""
    if not is_torchdata_available():
        return False
    try:
        return importlib.util.find_spec("torchdata.stateful_dataloader") is not None
    except (ImportError, ValueError):
        return False


def is_safetensors_available() -> bool:
    """Return whether safetensors is installed (looked up, not imported)."""
    return _installed("safetensors")


def is_bnb_available(min_version: str | None = None) -> bool:
    """Return whether bitsandbytes is installed (at least `min_version` when given)."""
    if not _installed("bitsandbytes"):
        return False
    if min_version is None:
        return True
    return compare_versions("bitsandbytes", ">=", min_version)


def is_4bit_bnb_available() -> bool:
    """Return whether bitsandbytes is installed in a version with 4-bit support."""
    return is_bnb_available("0.39.0")


def is_8bit_bnb_available() -> bool:
    """Return whether bitsandbytes is installed in a version with 8-bit support."""
    return is_bnb_available("0.37.2")


def is_peft_available() -> bool:
    """Return whether peft is installed (looked up, not imported)."""
    return _installed("peft")


def is_megatron_lm_available() -> bool:
    """Return whether megatron_lm is installed (looked up, not imported)."""
    return _installed("megatron", "megatron-core", "megatron_core", "megatron-lm")


def is_msamp_available() -> bool:
    """Return whether msamp is installed (looked up, not imported)."""
    return _installed("msamp", "ms-amp", "msamp")


def is_transformer_engine_available() -> bool:
    """Return whether transformer_engine is installed (looked up, not imported)."""
    return _installed("transformer_engine", "transformer_engine", "transformer-engine")


def is_torchao_available() -> bool:
    """Return whether torchao is installed (looked up, not imported)."""
    return _installed("torchao")


def is_fp8_available() -> bool:
    """Return whether an fp8 recipe package (MS-AMP, Transformer Engine or torchao) is installed."""
    return is_msamp_available() or is_transformer_engine_available() or is_torchao_available()


def is_schedulefree_available() -> bool:
    """Return whether schedulefree is installed (looked up, not imported)."""
    return _installed("schedulefree")


def is_lomo_available() -> bool:
    """Return whether lomo is installed (looked up, not imported)."""
    return _installed("lomo_optim", "lomo-optim", "lomo_optim")


def is_pippy_available() -> bool:
    """Return whether pippy is installed (looked up, not imported)."""
    return _installed("pippy", "torchpippy", "pippy")


def is_import_timer_available() -> bool:
    """Return whether import_timer is installed (looked up, not imported)."""
    return _installed("import_timer", "import-timer", "import_timer")


def is_triton_available() -> bool:
    """Return whether triton is installed (looked up, not imported)."""
    return _installed("triton")


def is_torch_tensorrt_available() -> bool:
    """Return whether torch_tensorrt is installed (looked up, not imported)."""
    return _installed("torch_tensorrt", "torch_tensorrt", "torch-tensorrt")


def is_ipex_available() -> bool:
    """Return whether Intel's extension for PyTorch is installed (looked up, not imported)."""
    return _installed(
        "intel_extension_for_pytorch", "intel_extension_for_pytorch", "intel-extension-for-pytorch"
    )


def is_ccl_available() -> bool:
    """Return whether oneCCL's bindings for torch are installed (looked up, not imported)."""
    return _installed("oneccl_bindings_for_pytorch", "oneccl_bind_pt") or _installed(
        "torch_ccl", "oneccl_bind_pt"
    )


# Versions ------------------------------------------------------------------------------------
def _version_parser() -> tuple[type, Callable[[str], Any]]:
    """Return packaging's Version class and parse function: the installed packaging's, else the
    copy torch vendors (accel does not depend on packaging)."""
    try:
        module: Any = importlib.import_module("packaging.version")
    except ImportError:
        module = importlib.import_module("torch._vendor.packaging.version")
    return module.Version, module.parse


def compare_versions(library_or_version: str | Any, operation: str, requirement_version: str) -> bool:
    """Return whether the installed version of a distribution (or a version string) compares to
    `requirement_version` by `operation` (one of `>`, `>=`, `==`, `!=`, `<=`, `<`)."""
    Version, parse = _version_parser()
    if operation not in _OPERATORS:
        raise ValueError(
            f"compare_versions: operation must be one of {', '.join(_OPERATORS)}, got {operation!r}"
        )
    version = library_or_version
    if isinstance(version, str) and not version[:1].isdigit():
        version = importlib.metadata.version(version)  # a distribution's name
    if not isinstance(version, Version):
        version = parse(str(version))
    return _OPERATORS[operation](version, parse(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    """Return whether the running torch's release (local build tag dropped) compares to `version`."""
    _, parse = _version_parser()
    return compare_versions(parse(parse(torch.__version__).base_version), operation, version)


def is_weights_only_available() -> bool:
    """Return whether `torch.load(weights_only=True)` can allow-list classes (torch 2.4 and later)."""
    return is_torch_version(">=", "2.4.0")


# Devices -------------------------------------------------------------------------------------
def is_torch_distributed_available() -> bool:
    """Return whether this torch build has `torch.distributed`."""
    return bool(torch.distributed.is_available())


def is_cuda_available() -> bool:
    """Return whether torch can use a CUDA device (asks torch)."""
    return bool(torch.cuda.is_available())


def is_rocm_available() -> bool:
    """Return whether torch is a ROCm (HIP) build that sees an AMD GPU (asks torch)."""
    return torch.version.hip is not None and bool(torch.cuda.is_available())


def check_cuda_fp8_capability() -> bool:
    """Return whether the current CUDA device computes in fp8 (compute capability 8.9 or newer)."""
    if not torch.cuda.is_available():
        return False
    return tuple(torch.cuda.get_device_capability()) >= (8, 9)


def is_mpi_available() -> bool:
    """Return whether this torch build has the MPI process-group backend."""
    return bool(torch.distributed.is_available() and torch.distributed.is_mpi_available())


def is_xccl_available() -> bool:
    """Return whether this torch build has Intel's XCCL process-group backend (torch 2.7 and later)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed import distributed_c10d

    probe = getattr(distributed_c10d, "is_xccl_available", None)
    return bool(probe is not None and probe())


def is_mps_available(min_version: str = "1.12") -> bool:
    """Return whether torch can use a Apple's MPS device (asks torch)."""
    del min_version  # every torch accel supports is newer
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available() and mps.is_built())


def is_xpu_available(check_device: bool = False) -> bool:
    """Return whether torch can use a Intel XPU device (asks torch)."""
    if not _torch_backend("xpu"):
        return False
    return not check_device or torch.xpu.device_count() > 0


def _vendor_device(module: str, device: str, check_device: bool) -> bool:
    """Return whether the extension `module` is installed and torch has the `device` kind;
    `check_device` also asks that one device be usable."""
    if not _installed(module, module, module.replace("_", "-")):
        return False
    if not check_device:
        return True
    try:
        importlib.import_module(module)  # the extension registers torch.<device>
    except Exception:
        return False
    return _torch_backend(device)


def is_npu_available(check_device: bool = False) -> bool:
    """Return whether torch can use a Ascend NPU device (asks torch)."""
    return _vendor_device("torch_npu", "npu", check_device)


def is_mlu_available(check_device: bool = False) -> bool:
    """Return whether torch can use a Cambricon MLU device (asks torch)."""
    return _vendor_device("torch_mlu", "mlu", check_device)


def is_musa_available(check_device: bool = False) -> bool:
    """Return whether torch can use a Moore Threads MUSA device (asks torch)."""
    return _vendor_device("torch_musa", "musa", check_device)


def is_sdaa_available(check_device: bool = False) -> bool:
    """Return whether torch can use a SDAA device (asks torch)."""
    return _vendor_device("torch_sdaa", "sdaa", check_device)


def is_hpu_available(init_hccl: bool = False) -> bool:
    """Return whether Habana's torch plugin is installed (looked up, not imported)."""
    del init_hccl  # accel never starts HCCL from a probe
    return _installed("habana_frameworks", "habana-torch-plugin", "habana_frameworks")


def is_habana_gaudi1() -> bool:
    """Return whether the Habana device is a first-generation Gaudi (asks Habana's plugin, which is
    imported only when it is installed)."""
    if not is_hpu_available():
        return False
    try:
        experimental = importlib.import_module("habana_frameworks.torch.utils.experimental")
        return bool(experimental._get_device_type() == experimental.synDeviceType.synDeviceGaudi)
    except Exception:  # a plugin without a device (or another layout) is not a Gaudi1
        return False


def is_neuron_available() -> bool:
    """Return whether torch-neuronx is installed (looked up, not imported)."""
    return _installed("torch_neuronx", "torch-neuronx", "torch_neuronx")


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Return whether this machine computes in bfloat16: on a TPU unless `ignore_tpu`, on CUDA and
    XPU when the device supports it, on the CPU always (in every torch accel supports)."""
    if is_torch_xla_available(check_is_tpu=True):
        return not ignore_tpu
    if is_cuda_available():
        return bool(torch.cuda.is_bf16_supported())
    if is_xpu_available():
        return bool(torch.xpu.is_bf16_supported())
    return True


def is_fp16_available() -> bool:
    """Return whether fp16 mixed precision can run here (torch supports it on every device kind
    accel runs on, the CPU included)."""
    return True
