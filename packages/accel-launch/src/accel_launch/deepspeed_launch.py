"""DeepSpeed's part of a launch: its options from the config, the checks made before anything
starts, and the env vars its workers get.

accel starts a DeepSpeed job like every other job, through torch's elastic agent, not through
DeepSpeed's runner; the accel-deepspeed adapter in each worker reads the ACCEL_DEEPSPEED_* variables
written here. Neither torch nor deepspeed is imported: whether they are installed is asked of
importlib, and whether a GPU is there of the device files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path

from accel_launch.config_schema import ConfigError
from accel_launch.effective_config import EffectiveConfig
from accel_launch.launch_options import DeepSpeedOptions
from accel_state.environment import env_vars
from accel_state.environment.json_object import json_object_problem

# Printed wherever the user is: the paths are the repository's (`accel` on PyPI is another project).
INSTALL_HINT = (
    "DeepSpeed jobs need accel-deepspeed and deepspeed; from the repository root: "
    "pip install -c constraints.txt ./packages/accel-state ./packages/accel-deepspeed deepspeed==0.19.8"
)
# The modules a DeepSpeed worker imports: the adapter and DeepSpeed itself.
REQUIRED_MODULES = ("accel_deepspeed", "deepspeed")
# Device files of GPUs that DeepSpeed's "cuda" accelerator drives: NVIDIA's, AMD's (ROCm), and
# WSL's paravirtual GPU, behind which an NVIDIA GPU shows no /dev/nvidia* file.
_GPU_DEVICE_GLOBS = ("nvidia[0-9]*", "kfd", "dxg")


def deepspeed_options(config: EffectiveConfig) -> DeepSpeedOptions:
    """Return the DeepSpeed options of a DeepSpeed job's effective config (the config file made absolute).

    The workers may change folder before the adapter reads the file: the path is resolved here.
    """
    config_file = config["deepspeed_config_file"]
    return DeepSpeedOptions(
        config_file=str(Path(config_file).expanduser().absolute()) if config_file else None,
        zero_stage=config["zero_stage"],
        offload_optimizer_device=config["offload_optimizer_device"],
        offload_param_device=config["offload_param_device"],
        gradient_clipping=config["gradient_clipping"],
        zero3_init=config["zero3_init_flag"],
        zero3_save_16bit_model=config["zero3_save_16bit_model"],
    )


def check_deepspeed_job(config: EffectiveConfig) -> None:
    """Raise ConfigError when a DeepSpeed job could not start: a bad JSON config, or no adapter."""
    config_file = config["deepspeed_config_file"]
    if config_file:
        problem = json_config_problem(config_file)
        if problem is not None:
            raise ConfigError(f"{config.where('deepspeed_config_file')}: {config_file}: {problem}")
    if any(importlib.util.find_spec(name) is None for name in REQUIRED_MODULES):
        raise ConfigError(INSTALL_HINT)


def json_config_problem(config_file: str) -> str | None:
    """Return what makes `config_file` unusable as a DeepSpeed JSON config, or None when it is usable."""
    return json_object_problem(config_file)


def deepspeed_env(
    options: DeepSpeedOptions,
    *,
    cpu: bool,
    environ: Mapping[str, str],
    gpu_visible: Callable[[Mapping[str, str]], bool] | None = None,
) -> dict[str, str]:
    """Return the env vars a DeepSpeed job's workers get from `options`; only those given are set.

    `environ` is what the workers would see otherwise. DS_ACCELERATOR becomes "cpu" when the job
    runs on the CPU (`cpu`, or no GPU visible) unless it is set there already.
    """
    gpu_visible = visible_gpu if gpu_visible is None else gpu_visible
    env: dict[str, str] = {}
    if options.config_file is not None:
        env[env_vars.DEEPSPEED_CONFIG_FILE] = options.config_file
    if options.zero_stage is not None:
        env[env_vars.DEEPSPEED_ZERO_STAGE] = str(options.zero_stage)
    if options.offload_optimizer_device is not None:
        env[env_vars.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE] = options.offload_optimizer_device
    if options.offload_param_device is not None:
        env[env_vars.DEEPSPEED_OFFLOAD_PARAM_DEVICE] = options.offload_param_device
    if options.gradient_clipping is not None:
        env[env_vars.GRADIENT_CLIPPING] = repr(float(options.gradient_clipping))
    if options.zero3_init is not None:
        env[env_vars.DEEPSPEED_ZERO3_INIT] = _boolean_word(options.zero3_init)
    if options.zero3_save_16bit_model is not None:
        env[env_vars.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL] = _boolean_word(options.zero3_save_16bit_model)
    if env_vars.DS_ACCELERATOR not in environ and (cpu or not gpu_visible(environ)):
        env[env_vars.DS_ACCELERATOR] = "cpu"
    return env


def visible_gpu(environ: Mapping[str, str], dev: Path = Path("/dev")) -> bool:
    """Return True when this machine has a GPU that DeepSpeed would drive and CUDA_VISIBLE_DEVICES
    does not hide; read from device files, without torch (which would also initialise CUDA here).

    When in doubt it answers True, which leaves the choice to DeepSpeed's own detection.
    """
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and (hidden.strip() == "" or hidden.strip().startswith("-1")):
        return False
    return any(any(dev.glob(pattern)) for pattern in _GPU_DEVICE_GLOBS)


def _boolean_word(value: bool) -> str:
    # Accelerate's launcher writes these two words; accel_state.environment.env_vars.read_flag reads them.
    return "true" if value else "false"
