"""The kinds of distributed set-up a script can run under, and which one this process uses."""

from __future__ import annotations

import enum
import glob
import importlib.util
import os

from accel_state.environment import env_vars


class DistributedType(str, enum.Enum):
    """How the processes of a job are connected; Accelerate's names and values.

    Every member of Accelerate's enum is here so that a script's checks such as
    `if accelerator.distributed_type in (DistributedType.MULTI_GPU, DistributedType.MULTI_NPU)`
    evaluate; only the members with an installed backend can set a process up.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"

    def __str__(self) -> str:
        return self.value


def _parse(value: DistributedType | str, source: str) -> DistributedType:
    try:
        return DistributedType(str(value).strip().upper())
    except ValueError:
        choices = ", ".join(t.value for t in DistributedType)
        raise ValueError(f"{source}: {value!r} is not a distributed type; choose one of {choices}") from None


def xla_device_configured() -> bool:
    """Return True when torch_xla can be imported and an XLA device is configured: `PJRT_DEVICE` is
    set, or this machine has a TPU. Installing torch_xla alone does not make a run an XLA run.

    Neither torch_xla nor torch is imported: the answer costs a path lookup.
    """
    try:
        if importlib.util.find_spec("torch_xla") is None:
            return False
    except (ImportError, ValueError):
        return False
    if os.environ.get(env_vars.PJRT_DEVICE, "").strip():
        return True
    return tpu_present()


def tpu_present() -> bool:
    """Return True when this machine shows TPU chips (/dev/accel* on v2-v4, /dev/vfio/* on v5 and later)."""
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def resolve_distributed_type(
    requested: DistributedType | str | None = None, *, cpu: bool = False
) -> DistributedType:
    """Return the type whose backend sets this process up: the argument, else ACCEL_DISTRIBUTED_TYPE
    (written by the launcher), else XLA when an XLA device is configured (`xla_device_configured`)
    and `cpu` was not asked for, else NO, which the native backend refines from the environment
    (MULTI_CPU or MULTI_GPU when several processes were launched)."""
    if requested is not None:
        return _parse(requested, "distributed_type argument")
    from_env = env_vars.read_str(env_vars.DISTRIBUTED_TYPE)
    if from_env is not None:
        try:
            return _parse(from_env, f"environment variable {env_vars.DISTRIBUTED_TYPE}")
        except ValueError as error:
            raise env_vars.EnvVarError(str(error)) from None
    if not cpu and xla_device_configured():
        return DistributedType.XLA
    return DistributedType.NO
