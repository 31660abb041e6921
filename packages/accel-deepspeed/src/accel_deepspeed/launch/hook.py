"""DeepSpeed's launch hook: `--use_deepspeed`, Accelerate's `deepspeed_config:` section (each key
a flag taking a value, as `--zero3_init_flag true`), the questions `accel config` asks for it, the
checks made before anything starts, and the env vars its workers get.

accel starts a DeepSpeed job like every other job, through torch's elastic agent, not through
DeepSpeed's runner; the adapter in each worker reads the ACCEL_DEEPSPEED_* variables written here.
Neither torch nor deepspeed is imported: whether they are installed is asked of importlib, and
whether a GPU is there of the device files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel_state.backends.adapter_stand_ins import DEEPSPEED, DEEPSPEED_INSTALL_HINT
from accel_state.environment import env_vars
from accel_state.environment.choices import DEEPSPEED_OFFLOAD_DEVICES, ZERO_STAGES
from accel_state.seam.launch_hook import (
    ConfigKey,
    JobConfig,
    LaunchHookError,
    Question,
    WorkerJob,
    settings_env,
)

INSTALL_HINT = DEEPSPEED_INSTALL_HINT
# The modules a DeepSpeed worker imports: the adapter and DeepSpeed itself.
REQUIRED_MODULES = ("accel_deepspeed", "deepspeed")
# The one multi-machine launcher accel has: torch's elastic agent on every machine.
STANDARD_MULTINODE_LAUNCHER = "standard"
# Device files of GPUs that DeepSpeed's "cuda" accelerator drives: NVIDIA's, AMD's (ROCm), and
# WSL's paravirtual GPU, behind which an NVIDIA GPU shows no /dev/nvidia* file.
_GPU_DEVICE_GLOBS = ("nvidia[0-9]*", "kfd", "dxg")


def _config_file_problem(raw: str) -> str | None:
    """Return what is wrong with ACCEL_DEEPSPEED_CONFIG_FILE's value (a JSON file or inline JSON)."""
    from accel_state.environment.json_object import json_object_problem  # json only when checked

    problem = json_object_problem(raw)
    return None if problem is None else f"is not a usable DeepSpeed config ({problem})"


# Accelerate's `deepspeed_config:` keys. Those with a flag take a value, as in Accelerate
# (`--zero3_init_flag true`), and are refused without DeepSpeed.
KEYS = (
    ConfigKey(
        "deepspeed_config_file",
        "str",
        None,
        "DeepSpeed JSON config file (DeepSpeed only).",
        env_var=env_vars.DEEPSPEED_CONFIG_FILE,
        env_check=_config_file_problem,
    ),
    ConfigKey(
        "zero_stage",
        "int",
        None,
        "ZeRO stage, 0 to 3 (DeepSpeed only).",
        tuple(str(stage) for stage in ZERO_STAGES),
        env_var=env_vars.DEEPSPEED_ZERO_STAGE,
    ),
    ConfigKey(
        "offload_optimizer_device",
        "choice",
        None,
        "Where ZeRO offloads optimizer states (DeepSpeed only).",
        DEEPSPEED_OFFLOAD_DEVICES,
        env_var=env_vars.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE,
    ),
    ConfigKey(
        "offload_param_device",
        "choice",
        None,
        "Where ZeRO-3 offloads parameters (DeepSpeed only).",
        DEEPSPEED_OFFLOAD_DEVICES,
        env_var=env_vars.DEEPSPEED_OFFLOAD_PARAM_DEVICE,
    ),
    ConfigKey("offload_optimizer_nvme_path", "str", None, "NVMe folder for optimizer offload.", flag=False),
    ConfigKey("offload_param_nvme_path", "str", None, "NVMe folder for parameter offload.", flag=False),
    ConfigKey(
        "gradient_accumulation_steps",
        "int",
        None,
        "Used when the top-level key is not set.",
        minimum=1,
        top_level=True,
    ),
    ConfigKey(
        "gradient_clipping",
        "float",
        None,
        "Clip gradients to this norm (DeepSpeed only).",
        minimum=0,
        env_var=env_vars.GRADIENT_CLIPPING,
    ),
    ConfigKey(
        "zero3_init_flag",
        "bool",
        None,
        "Build models sharded, with deepspeed.zero.Init (ZeRO-3).",
        env_var=env_vars.DEEPSPEED_ZERO3_INIT,
    ),
    ConfigKey(
        "zero3_save_16bit_model",
        "bool",
        None,
        "Save ZeRO-3 models as one 16-bit state dict.",
        env_var=env_vars.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL,
    ),
    ConfigKey(
        "deepspeed_multinode_launcher",
        "str",
        None,
        "Only 'standard': accel starts every machine through torch's elastic agent.",
    ),
)
# Used by DeepSpeed's own multi-machine launchers, which accel refuses (deepspeed_multinode_launcher).
PASSED_KEYS = ("deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter")


def _without_file(section: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    return "deepspeed_config_file" not in section


def _stage_at_least(stage: int) -> Callable[[Mapping[str, Any], Mapping[str, Any]], bool]:
    def when(section: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
        return _without_file(section, config) and section.get("zero_stage", -1) >= stage

    return when


QUESTIONS = (
    Question(
        "deepspeed_config_file",
        "Path to a DeepSpeed JSON config file (leave empty to answer the ZeRO questions instead)",
        default="",
        optional=True,
    ),
    Question(
        "zero_stage",
        "Which ZeRO stage do you want to use?",
        default="2",
        choices=tuple(str(stage) for stage in ZERO_STAGES),
        when=_without_file,
    ),
    Question(
        "offload_optimizer_device",
        "Where should optimizer states be offloaded?",
        default="none",
        choices=DEEPSPEED_OFFLOAD_DEVICES,
        when=_stage_at_least(2),
    ),
    Question(
        "offload_param_device",
        "Where should parameters be offloaded?",
        default="none",
        choices=DEEPSPEED_OFFLOAD_DEVICES,
        when=_stage_at_least(3),
    ),
    Question(
        "zero3_init_flag",
        "Build models sharded across ranks (deepspeed.zero.Init)?",
        default=True,
        confirm=True,
        when=_stage_at_least(3),
    ),
    Question(
        "zero3_save_16bit_model",
        "Save models as one 16-bit state dict?",
        default=False,
        confirm=True,
        when=_stage_at_least(3),
    ),
    # Not asked: the only launcher there is, written for several machines.
    Question(
        "deepspeed_multinode_launcher",
        "",
        default=STANDARD_MULTINODE_LAUNCHER,
        when=lambda section, config: config.get("num_machines", 1) > 1,
    ),
)


def check_multinode_launcher(config: JobConfig) -> None:
    """Raise LaunchHookError for a DeepSpeed job asking for a multi-machine launcher accel lacks."""
    if config.given("distributed_type") != DEEPSPEED.distributed_types[0]:
        return
    launcher = config["deepspeed_multinode_launcher"]
    if launcher is not None and launcher != STANDARD_MULTINODE_LAUNCHER:
        raise LaunchHookError(
            f"{config.where('deepspeed_multinode_launcher')} is {launcher!r}, but accel launches DeepSpeed "
            "jobs through torch's elastic agent on every machine: only 'standard' is accepted"
        )


def check_deepspeed_job(config: JobConfig) -> None:
    """Raise LaunchHookError when a DeepSpeed job could not start: a bad JSON config, or no adapter."""
    config_file = config["deepspeed_config_file"]
    if config_file:
        problem = json_config_problem(config_file)
        if problem is not None:
            raise LaunchHookError(f"{config.where('deepspeed_config_file')}: {config_file}: {problem}")
    if any(importlib.util.find_spec(name) is None for name in REQUIRED_MODULES):
        raise LaunchHookError(INSTALL_HINT)


def json_config_problem(config_file: str) -> str | None:
    """Return what makes `config_file` unusable as a DeepSpeed JSON config, or None when it is usable."""
    from accel_state.environment.json_object import json_object_problem  # json only when a job starts

    return json_object_problem(config_file)


def deepspeed_env(
    job: WorkerJob, *, gpu_visible: Callable[[Mapping[str, str]], bool] | None = None
) -> dict[str, str]:
    """Return the env vars a DeepSpeed job's workers get; only the settings given are set.

    The JSON config file is made absolute (the workers may change folder before the adapter reads
    it). DS_ACCELERATOR becomes "cpu" when the job runs on the CPU (`job.cpu`, or no GPU visible
    in what the workers see) unless it is set there already.
    """
    settings = dict(job.settings)
    config_file = settings.get("deepspeed_config_file")
    if config_file:
        settings["deepspeed_config_file"] = str(Path(config_file).expanduser().absolute())
    if settings.get("gradient_clipping") is not None:
        settings["gradient_clipping"] = float(settings["gradient_clipping"])
    env = settings_env(KEYS, settings)
    visible = visible_gpu if gpu_visible is None else gpu_visible  # looked up here: tests replace it
    if env_vars.DS_ACCELERATOR not in job.environ and (job.cpu or not visible(job.environ)):
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


HOOK = DEEPSPEED._replace(
    keys=KEYS,
    passed_keys=PASSED_KEYS,
    questions=QUESTIONS,
    check=check_multinode_launcher,
    check_launch=check_deepspeed_job,
    worker_env=deepspeed_env,
    stand_in=False,
)
