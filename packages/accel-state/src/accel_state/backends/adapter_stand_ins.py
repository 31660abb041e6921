"""Stand-in launch hooks of the adapters shipped as their own packages (accel-deepspeed,
accel-xla), registered by accel-state and replaced by the adapter's own hook when it is installed.

A stand-in knows what a user may ask for without the adapter (its selector flag, its config
section, which it passes over unchecked, its other flags and env vars) and its install line, so
that asking for the engine is one line naming the install command rather than "no such option".
The adapters' hooks take their selector, section and install line from here, so that both read
the same.
"""

from __future__ import annotations

from collections.abc import Callable

from accel_state.environment import env_vars
from accel_state.seam.launch_hook import JobConfig, LaunchHook, LaunchHookError, Selector

# Printed wherever the user is: the paths are the repository's (`accel` on PyPI is another project).
DEEPSPEED_INSTALL_HINT = (
    "DeepSpeed jobs need accel-deepspeed and deepspeed; from the repository root: "
    "pip install -c constraints.txt ./packages/accel-state ./packages/accel-deepspeed deepspeed==0.19.8"
)
# torch_xla 2.9.0 loads only into torch 2.9.0, whose PyPI wheel for Linux is the CUDA build.
XLA_INSTALL_HINT = (
    "XLA jobs need accel-xla and torch_xla, with torch 2.9.0 from PyTorch's CPU index; from the "
    "repository root: pip install --index-url https://download.pytorch.org/whl/cpu torch==2.9.0 && "
    "pip install -c constraints-xla.txt ./packages/accel-state ./packages/accel-data ./packages/accel-amp "
    "./packages/accel-launch ./packages/accel-big-modeling './packages/accel[xla]' ./packages/accel-xla"
)


def refuse_with(hint: str) -> Callable[[JobConfig], None]:
    """Return a `check_launch` that refuses every job with `hint`."""

    def check_launch(config: JobConfig) -> None:
        raise LaunchHookError(hint)

    return check_launch


DEEPSPEED = LaunchHook(
    name="DEEPSPEED",
    title="DeepSpeed",
    distributed_types=("DEEPSPEED",),
    cpu_types=("DEEPSPEED",),  # DeepSpeed has a CPU accelerator
    selector=Selector(
        ("use_deepspeed",),
        "Run a DeepSpeed job (distributed_type DEEPSPEED); needs accel-deepspeed and deepspeed.",
    ),
    section="deepspeed_config",
    check_launch=refuse_with(DEEPSPEED_INSTALL_HINT),
    stand_in=True,
    install_hint=DEEPSPEED_INSTALL_HINT,
    adapter_flags=(
        "deepspeed_config_file",
        "zero_stage",
        "offload_optimizer_device",
        "offload_param_device",
        "gradient_clipping",
        "zero3_init_flag",
        "zero3_save_16bit_model",
        "deepspeed_multinode_launcher",
    ),
    adapter_env_vars=(
        env_vars.DEEPSPEED_CONFIG_FILE,
        env_vars.DEEPSPEED_ZERO_STAGE,
        env_vars.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE,
        env_vars.DEEPSPEED_OFFLOAD_PARAM_DEVICE,
        env_vars.GRADIENT_CLIPPING,
        env_vars.DEEPSPEED_ZERO3_INIT,
        env_vars.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL,
    ),
    reported=(("accel_deepspeed", "accel-deepspeed"), ("deepspeed", "deepspeed")),
)

XLA = LaunchHook(
    name="XLA",
    title="XLA",
    distributed_types=("XLA",),
    selector=Selector(
        ("xla", "tpu"),
        "Run an XLA job (distributed_type XLA) through torch_xla.launch: TPU chips, or XLA's CPU device "
        "when PJRT_DEVICE=CPU; needs accel-xla and torch_xla.",
        dest="use_xla",
    ),
    offered_by_config=False,  # its questions belong to their own issue
    check_launch=refuse_with(XLA_INSTALL_HINT),
    stand_in=True,
    install_hint=XLA_INSTALL_HINT,
    reported=(("accel_xla", "accel-xla"), ("torch_xla", "torch-xla")),
)
