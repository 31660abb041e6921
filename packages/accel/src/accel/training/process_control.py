"""The process facts and process control an `Accelerator` offers, delegated to the shared state."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from accel_state import AcceleratorState


class ProcessControl:
    """Who this process is and how it waits for the others; `self.state` is the AcceleratorState."""

    state: AcceleratorState

    # Facts about this process --------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device this process computes on (prepared objects and batches go there)."""
        return self.state.device

    @property
    def distributed_type(self) -> Any:
        """The backend of the run (`DistributedType`), chosen when the Accelerator was built."""
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        """How many processes take part in the job."""
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        """This process's rank in the whole job."""
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        """This process's rank on its machine."""
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process of rank 0 of the whole job."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the first process on its machine."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process of the highest rank."""
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.state.use_distributed

    # Process control (delegated to the shared state) ---------------------------------------
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (a barrier with the run's timeout)."""
        self.state.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager:
        """Return a context that runs its block on the main process first, then on the others."""
        return self.state.main_process_first()

    def local_main_process_first(self) -> contextlib.AbstractContextManager:
        """Return a context in which each machine's first process runs first."""
        return self.state.local_main_process_first()

    def on_main_process(self, function: Callable) -> Callable:
        """Decorate `function` to run on the main process only (None elsewhere)."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable) -> Callable:
        """Decorate `function` to run on each machine's first process only."""
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable) -> Callable:
        """Decorate `function` to run on the process of the highest rank only."""
        return self.state.on_last_process(function)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Any:
        """Decorate `function` to run on the process of rank `process_index` only."""
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorate `function` to run on the process of local rank `local_process_index`."""
        return self.state.on_local_process(function, local_process_index=local_process_index)

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Any:
        """Return a context yielding this process's contiguous share of `inputs`."""
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print on the main process only, so N processes do not print N copies."""
        self.state.print(*args, **kwargs)
