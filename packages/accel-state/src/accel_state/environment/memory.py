"""Freeing device memory, and retrying a function with a smaller batch when memory runs out."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch

_F = TypeVar("_F", bound=Callable[..., Any])

# Messages of the errors that mean "this batch does not fit" (Accelerate's list): every device
# allocator's "<device> out of memory." (CUDA, HIP, XPU, NPU, MPS), cuDNN's, the CPU allocator's
# and Habana's.
_OUT_OF_MEMORY_MESSAGES = (
    " out of memory.",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "can't allocate memory",  # the CPU allocator's "DefaultCPUAllocator: can't allocate memory"
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)


def _empty_device_caches() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        xpu.empty_cache()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        torch.mps.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Return a list of as many Nones as `objects`, after dropping this function's references to
    them, collecting garbage and emptying the device caches.

    Use it as `model, optimizer = release_memory(model, optimizer)` so the caller's names stop
    holding the objects too.
    """
    objects_list = list(objects)
    for index in range(len(objects_list)):
        objects_list[index] = None
    del objects
    gc.collect()
    _empty_device_caches()
    return [None] * len(objects_list)


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Return whether `exception` says the work did not fit in memory (CUDA or CPU)."""
    if isinstance(exception, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        message = str(exception.args[0])
        return any(known in message for known in _OUT_OF_MEMORY_MESSAGES)
    return False


def find_executable_batch_size(
    function: _F | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Return `function` wrapped to be called as `function(*args, **kwargs)` and to pass it a
    `batch_size` first argument: `starting_batch_size`, halved after each out-of-memory error
    (garbage is collected and device caches emptied between tries) until a call succeeds.

    Usable bare (`@find_executable_batch_size`) or with arguments
    (`@find_executable_batch_size(starting_batch_size=64)`). The caller must not pass
    `batch_size` itself; reaching a batch size of 0 raises RuntimeError.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    reduce = reduce_batch_size_fn or (lambda: batch_size // 2)
    batch_size = starting_batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        gc.collect()
        _empty_device_caches()
        parameters = list(inspect.signature(function).parameters)
        if len(parameters) < len(args) + 1:
            given = ", ".join(f"{name}={value}" for name, value in zip(parameters[1:], args, strict=False))
            raise TypeError(
                f"batch size was passed into `{function.__name__}` as the first argument when called. "
                f"Remove this as the decorator already does so: `{function.__name__}({given})`"
            )
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                gc.collect()
                _empty_device_caches()
                batch_size = reduce()

    return decorator
