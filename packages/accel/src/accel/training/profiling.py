"""`accelerator.profile()`: run a block under torch's profiler and keep each rank's Chrome trace."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from accel.options.kwargs_handlers import ProfileKwargs
from accel_state import PartialState

PROFILE_PATTERN_NAME = "profile_{suffix}.json"


def trace_path(output_trace_dir: str | os.PathLike[str], process_index: int) -> str:
    """Return the file rank `process_index` writes its Chrome trace to."""
    return os.path.join(output_trace_dir, PROFILE_PATTERN_NAME.format(suffix=process_index))


@contextlib.contextmanager
def profile(handler: ProfileKwargs) -> Iterator[torch.profiler.profile]:
    """Yield a running profiler; after the block, write this rank's trace into the handler's
    `output_trace_dir` (when it has one) and wait for every rank."""
    with handler.build() as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    state = PartialState()
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    profiler.export_chrome_trace(trace_path(handler.output_trace_dir, state.process_index))
    state.wait_for_everyone()
