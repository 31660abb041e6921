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

from accel_state.environment import env_vars
from accel_state.environment.distributed_type import DistributedType, resolve_distributed_type
from accel_state.environment.launch_env import detect_launch_environment
from accel_state.process_group import group as process_group
from accel_state.process_group import timeouts
from accel_state.seam.backend import ProcessGroupOptions, ProcessRequest, backend_factory, setup_process
from accel_state.shared_state.splitting import split_for_process
from accel_state.shared_state.storage import SharedDict, per_thread_state, use_per_thread_state

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
F = TypeVar("F", bound=Callable[..., Any])


def resolve_timeout(timeout: datetime.timedelta | float | None) -> datetime.timedelta:
    """Return the collective timeout: the argument, else ACCEL_TIMEOUT (seconds), else 30 minutes.

    Raises ValueError naming the `timeout` argument, or env_vars.EnvVarError naming ACCEL_TIMEOUT,
    for anything but a finite number of seconds above 0 (a timedelta above 0 for the argument).
    """
    import math
    import numbers
    import os

    if timeout is None:
        seconds = env_vars.read_float(env_vars.TIMEOUT)
        if seconds is None:
            return DEFAULT_TIMEOUT
        if not (math.isfinite(seconds) and seconds > 0):
            raw = os.environ.get(env_vars.TIMEOUT)
            raise env_vars.EnvVarError(
                f"environment variable {env_vars.TIMEOUT}={raw!r} must be a finite number of seconds above 0"
            )
        return datetime.timedelta(seconds=seconds)
    if isinstance(timeout, datetime.timedelta):
        if timeout <= datetime.timedelta(0):
            raise ValueError(f"timeout must be above 0, got {timeout!r}")
        return timeout
    value: object = timeout  # whatever the caller passed, not what the annotation promises
    # bool is a number to Python, but `timeout=True` is a mistake, not one second.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"timeout must be a number of seconds or a datetime.timedelta, got {value!r} "
            f"({type(value).__name__})"
        )
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"timeout must be a finite number of seconds above 0, got {timeout!r}")
    return datetime.timedelta(seconds=seconds)


# What __init__ sets: reading one of them from a state that was reset is a StateResetError.
_PROCESS_FACTS = frozenset(
    {
        "launch_environment", "num_processes", "process_index", "local_process_index",
        "num_local_processes", "device", "backend", "communicator", "debug", "check_collectives",
        "timeout", "fork_launched", "distributed_type",
    }
)  # fmt: skip


# Set last by `PartialState.__init__`: in the shared dict, it marks the state initialised.
_INITIALIZED_MARK = "distributed_type"


class StateResetError(RuntimeError, AttributeError):
    """An object built before `AcceleratorState._reset_state()` was used after it (an AttributeError
    too, as Accelerate raises one there)."""


def reset_error(owner: str, name: str) -> StateResetError:
    """Return the error for reading `name` from an `owner` state that was reset (Accelerate's words first)."""
    return StateResetError(
        f"`{owner}` object has no attribute `{name}`. This happens if `{owner}._reset_state()` was called "
        f"and an `Accelerator` or `PartialState` was not reinitialized: the state was reset "
        f"({owner}._reset_state()); build a new Accelerator"
    )


class PartialState:
    """Rank, world size, device and process group of this process, initialised once."""

    _shared_state = SharedDict()

    def __init__(
        self,
        cpu: bool = False,
        timeout: datetime.timedelta | float | None = None,
        distributed_type: DistributedType | str | None = None,
        backend: str | None = None,
        init_method: str | None = None,
    ) -> None:
        """`backend` ("gloo", "nccl") and `init_method` (a rendezvous URL) override the process
        group's defaults (Accelerate's `InitProcessGroupKwargs`); only the first instance uses them."""
        # One lookup of the shared dict: every collective builds this.
        shared = self.__dict__ = self._shared_state
        if _INITIALIZED_MARK in shared:
            return
        env_vars.warn_unknown_variables()
        cpu = bool(env_vars.read_flag(env_vars.USE_CPU)) or cpu  # read first: a bad value is named
        requested = resolve_distributed_type(distributed_type, cpu=cpu)
        factory = backend_factory(requested)
        if factory.per_thread_state and not per_thread_state():
            use_per_thread_state()
            self.__dict__ = self._shared_state
        found = detect_launch_environment()
        if not factory.per_thread_state:  # replicas that are threads have no rank of their own in a group
            found = process_group.adopt_running_group(found)
        debug = bool(env_vars.read_flag(env_vars.DEBUG_MODE))
        # On unless set to a false word; empty means unset, as the launcher's check reads it.
        unset = env_vars.read_str(env_vars.CHECK_COLLECTIVES) is None
        asked = env_vars.read_flag(env_vars.CHECK_COLLECTIVES, default=True)  # read: a bad value is named
        check_collectives = debug or unset or asked
        resolved_timeout = resolve_timeout(timeout)
        group = ProcessGroupOptions(backend=backend, init_method=init_method)
        setup = setup_process(factory, ProcessRequest(found, cpu, resolved_timeout, group))
        found = setup.launch or found  # a runtime that assigns ranks itself (XLA) knows better
        self.launch_environment = found
        self.num_processes = found.world_size
        self.process_index = found.rank
        self.local_process_index = found.local_rank
        self.num_local_processes = found.local_world_size
        self.device = setup.device
        self.backend = setup.process_group_backend
        self.communicator = setup.communicator
        self.debug = debug
        self.check_collectives = check_collectives  # ranks agree on inputs before gather/broadcast/reduce
        self.timeout = resolved_timeout
        self.fork_launched = False
        self.distributed_type = setup.distributed_type  # set last: _INITIALIZED_MARK
        from accel_state.process_group import diagnosis  # its signal and thread exist only under accel launch

        diagnosis.install(found.rank)

    @property
    def initialized(self) -> bool:
        """Whether the shared state was built in this process (in this thread, where replicas are threads)."""
        return _INITIALIZED_MARK in self._shared_state

    @classmethod
    def current(cls) -> PartialState | None:
        """Return this process's state if it was built, else None, without building one (which
        would set the process up)."""
        return cls() if _INITIALIZED_MARK in cls._shared_state else None

    def __reduce__(self) -> tuple[type, tuple[()]]:
        # A pickled copy unpickles as this process's shared state, not as a detached snapshot.
        return (type(self), ())

    @classmethod
    def _reset_state(cls) -> None:
        """Forget the shared state (tests only); the process group itself stays up."""
        cls._shared_state.clear()

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the shared dict: after a reset, the process facts.
        if name in _PROCESS_FACTS and not self.initialized:
            raise reset_error("PartialState", name)
        raise AttributeError(f"'PartialState' object has no attribute '{name}'")

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
        """Whether more than one process takes part."""
        return self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process of rank 0 of the whole job."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the first process on its machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process of the highest rank."""
        return self.process_index == self.num_processes - 1

    # Process control --------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (a no-op on one process)."""
        if self.use_distributed:
            with timeouts.named_collective("wait_for_everyone"):
                self.communicator.barrier()

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

    def on_local_process(self, function: F | None = None, local_process_index: int | None = None) -> Any:
        """Decorate `function` so that it runs only on each node's process `local_process_index`."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_when(lambda: self.local_process_index == local_process_index, function)

    @staticmethod
    def _only_when(condition: Callable[[], bool], function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if condition():
                return function(*args, **kwargs)
            return None

        return wrapper  # type: ignore[return-value]

    def destroy_process_group(self, group: Any = None) -> None:
        """Tear down `group` (default: this job's process group); a no-op without one.

        Under a fork launch (notebooks) the launcher owns the default group and tears it down itself.
        """
        if self.fork_launched and group is None:
            return
        process_group.destroy_process_group(group)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print on the main process only, so N processes do not print N copies."""
        if self.is_main_process:
            builtins.print(*args, **kwargs)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of `inputs` (list, tuple, tensor or dict of them)."""
        yield split_for_process(inputs, self.process_index, self.num_processes, apply_padding)


def _describe_wait() -> str:
    state = PartialState()
    seconds = state.timeout.total_seconds()
    return (
        f"rank {state.process_index} of {state.num_processes} waited {seconds:g} s (the process group's "
        f"timeout: Accelerator(timeout=...) or {env_vars.TIMEOUT})"
    )


timeouts.describe_waits_with(_describe_wait)
