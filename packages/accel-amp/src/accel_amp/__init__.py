"""accel-amp: precision policies (fp32, bf16, fp16 with loss scaling) and wrapped optimizers/schedulers."""

from accel_amp.__about__ import __version__
from accel_amp.precision.loss_scaling import LossScaler
from accel_amp.precision.policies import (
    Bf16Policy,
    Fp16Policy,
    PrecisionPolicy,
    convert_to_fp32,
    precision_policy,
)
from accel_amp.wrappers.optimizer import AcceleratedOptimizer
from accel_amp.wrappers.scheduler import AcceleratedScheduler

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Bf16Policy",
    "Fp16Policy",
    "LossScaler",
    "PrecisionPolicy",
    "__version__",
    "convert_to_fp32",
    "precision_policy",
]
