"""Compiled CPU code draws its random numbers from torch's generator, as eager code does.

Inductor makes its own random numbers inside its kernels (a Philox stream of its own) unless its
`fallback_random` option is on; then it calls torch's random ops, which draw from torch's generator
exactly as the eager model would. On a GPU its own draws are fused into Triton kernels and fast. On
the CPU they are slower than torch's (the 4-block encoder of the benchmarks, dropout 0.1, one process
and one thread: 4.13 steps/s compiled with inductor's draws, 5.12 with torch's, 5.78 eager) and they
differ from eager's, so the same seed gives a compiled run other dropout masks than an eager one.

So on the CPU `prepare` compiles with inductor's `fallback_random` unless the plugin's options set it:
a compiled run then gets eager's dropout masks for the same seed, and a run that resumes with compile
switched off (or on) draws what it would have drawn.
"""

from __future__ import annotations

from typing import Any

import torch

OPTION = "fallback_random"


def device_type_of(model: torch.nn.Module) -> str | None:
    """Return the device type of `model`'s first parameter (else buffer), None when it has neither."""
    for parameter in model.parameters():
        return parameter.device.type
    for buffer in model.buffers():
        return buffer.device.type
    return None


def with_eager_random(compile_kwargs: dict[str, Any], device_type: str | None) -> dict[str, Any]:
    """Return torch.compile's keyword arguments with `fallback_random` on where it helps and is unset.

    Only inductor on the CPU; a mode other than the default becomes its options (torch.compile
    takes options or a mode, not both), so nothing the user asked for is dropped.
    """
    if device_type != "cpu" or compile_kwargs.get("backend") != "inductor":
        return compile_kwargs
    options = dict(compile_kwargs.get("options") or {})
    if OPTION in options:
        return compile_kwargs
    kwargs = dict(compile_kwargs)
    mode = kwargs.pop("mode", None)
    if not options and mode not in (None, "default"):
        from torch._inductor import list_mode_options

        options = dict(list_mode_options(mode, kwargs.get("dynamic")))
    options[OPTION] = True
    kwargs["options"] = options
    return kwargs
