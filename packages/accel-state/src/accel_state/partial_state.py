"""`PartialState`: the process-level facts every part of accel shares (rank, device, process group).

It is a shared-state singleton: every instance reads and writes the same dictionary, so any code
can build one cheaply to ask "which rank am I". Tests reset it with `PartialState._reset_state()`.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from accel_state import env_vars
from accel_state.device import choose_device, choose_process_group_backend
from accel_state.distributed_type import DistributedType
from accel_state.launch_env import detect_launch_environment
from accel_state.process_group import init_process_group

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
F = TypeVar("F", bound=Callable[..., Any])


def resolve_timeout(timeout: datetime.timedelta | float | None) -> datetime.timedelta:
    """Return the collective timeout: the argument, else ACCEL_TIMEOUT (seconds), else 30 minutes."""
    if timeout is None:
        seconds = env_vars.read_float(env_vars.TIMEOUT)
        return DEFAULT_TIMEOUT if seconds is None else datetime.timedelta(seconds=seconds)
    if isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=float(timeout))


class PartialState:
    """Rank, world size, device and process group of this process, initialised once."""

    _shared_state: dict[str, Any] = {}

    def __init__(self, cpu: bool = False, timeout: datetime.timedelta | float | None = None) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            return
        found = detect_launch_environment()
        cpu = cpu or bool(env_vars.read_flag(env_vars.USE_CPU))
        self.launch_environment = found
        self.num_processes = found.world_size
        self.process_index = found.rank
        self.local_process_index = found.local_rank
        self.num_local_processes = found.local_world_size
        self.device = choose_device(cpu, found.local_rank)
        self.backend: str | None = None
        self.debug = bool(env_vars.read_flag(env_vars.DEBUG_MODE))
        self.timeout = resolve_timeout(timeout)
        if found.is_distributed:
            self.backend = choose_process_group_backend(self.device)
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            init_process_group(found, self.backend, self.timeout)
            self.distributed_type = (
                DistributedType.MULTI_GPU if self.device.type == "cuda" else DistributedType.MULTI_CPU
            )
        else:
            self.distributed_type = DistributedType.NO
        self.fork_launched = False

    @property
    def initialized(self) -> bool:
        return "distributed_type" in self._shared_state

    @classmethod
    def _reset_state(cls) -> None:
        """Forget the shared state (tests only); the process group itself stays up."""
        cls._shared_state.clear()

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )

    # Who am I ---------------------------------------------------------------------------
    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    # Process control --------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (a no-op on one process)."""
        if self.use_distributed:
            from accel_state.collectives import barrier
            from accel_state.timeouts import named_collective

            with named_collective("wait_for_everyone"):
                barrier()

    @contextlib.contextmanager
    def _goes_first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process, then on the others (e.g. to download once)."""
        with self._goes_first(self.is_main_process):
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each node's main process, then on that node's others."""
        with self._goes_first(self.is_local_main_process):
            yield

    def on_main_process(self, function: F) -> F:
        """Decorate `function` so that it runs only on the main process."""
        return self._only_when(lambda: self.is_main_process, function)

    def on_local_main_process(self, function: F) -> F:
        """Decorate `function` so that it runs only on each node's main process."""
        return self._only_when(lambda: self.is_local_main_process, function)

    def on_last_process(self, function: F) -> F:
        """Decorate `function` so that it runs only on the last process."""
        return self._only_when(lambda: self.is_last_process, function)

    def on_process(self, function: F | None = None, process_index: int | None = None) -> Any:
        """Decorate `function` so that it runs only on process `process_index`."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_when(lambda: self.process_index == process_index, function)

    @staticmethod
    def _only_when(condition: Callable[[], bool], function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if condition():
                return function(*args, **kwargs)
            return None

        return wrapper  # type: ignore[return-value]

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print on the main process only, so N processes do not print N copies."""
        if self.is_main_process:
            builtins.print(*args, **kwargs)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of `inputs` (list, tuple, tensor or dict of them)."""
        from accel_state.splitting import split_for_process

        yield split_for_process(inputs, self.process_index, self.num_processes, apply_padding)
