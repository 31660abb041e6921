"""The inductor options accel sets for a model on the CPU, each only where the user's options do not.

- `fallback_random`: compiled code draws its random numbers from torch's generator, as eager code
  does. Inductor makes its own inside its kernels (a Philox stream of its own) unless this option
  is on. On a GPU its own draws are fused into Triton kernels and fast; on the CPU they are slower
  than torch's (the 4-block encoder of the benchmarks, dropout 0.1, one process and one thread:
  4.13 steps/s compiled with inductor's draws, 5.12 with torch's, 5.78 eager) and differ from
  eager's, so the same seed would give a compiled run other dropout masks than an eager one. With
  it, a compiled run gets eager's masks for the same seed, and a run that resumes with compile
  switched off (or on) draws what it would have drawn.
- `joint_custom_post_pass`: `joint_pass.CpuJointGraphPass`, which keeps what eager keeps for the
  backward: dropout's float noise instead of torch's bool mask (`dropout_noise`), and the float a
  mask comes from instead of the bool mask (`saved_masks`), whose store is slow on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from accel_state.compilation.inductor_options import with_mode_options

RANDOM_OPTION = "fallback_random"
JOINT_PASS_OPTION = "joint_custom_post_pass"


def device_type_of(model: torch.nn.Module) -> str | None:
    """Return the device type of `model`'s first parameter (else buffer), None when it has neither."""
    for parameter in model.parameters():
        return parameter.device.type
    for buffer in model.buffers():
        return buffer.device.type
    return None


def with_cpu_options(compile_kwargs: dict[str, Any], device_type: str | None) -> dict[str, Any]:
    """Return torch.compile's keyword arguments with accel's CPU options added where they are unset.

    Only inductor on the CPU; a mode other than the default becomes its options (torch.compile
    takes options or a mode, not both), so nothing the user asked for is dropped.
    """
    if device_type != "cpu" or compile_kwargs.get("backend") != "inductor":
        return compile_kwargs
    defaults = _cpu_defaults()
    if all(name in (compile_kwargs.get("options") or {}) for name in defaults):
        return compile_kwargs
    kwargs = dict(compile_kwargs)
    options = with_mode_options(
        kwargs.pop("options", None) or {}, kwargs.pop("mode", None), kwargs.get("dynamic")
    )
    for name, value in defaults.items():
        options.setdefault(name, value)
    kwargs["options"] = options
    return kwargs


def _cpu_defaults() -> dict[str, Any]:
    # Imported here: the pass's module imports inductor, which only a compile needs.
    from accel_state.compilation.joint_pass import CpuJointGraphPass

    return {RANDOM_OPTION: True, JOINT_PASS_OPTION: CpuJointGraphPass()}
