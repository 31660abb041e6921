"""`AcceleratorState`: the process facts of `PartialState` plus the run's training options."""

from __future__ import annotations

import datetime
from typing import Any

from accel_state.environment import env_vars
from accel_state.environment.choices import MIXED_PRECISION_CHOICES
from accel_state.environment.distributed_type import DistributedType
from accel_state.shared_state.partial_state import PartialState, StateResetError, reset_error

__all__ = ["AcceleratorState", "MixedPrecisionError", "StateResetError", "resolve_mixed_precision"]
from accel_state.shared_state.storage import SharedDict


class MixedPrecisionError(ValueError):
    """An unknown mixed-precision mode was asked for."""


def resolve_mixed_precision(requested: str | None) -> str:
    """Return the precision mode: the argument, else ACCEL_MIXED_PRECISION, else "no"."""
    source = "mixed_precision argument"
    if requested is None:
        requested = env_vars.read_str(env_vars.MIXED_PRECISION)
        source = f"environment variable {env_vars.MIXED_PRECISION}"
    mode = (requested or "no").lower()
    if mode not in MIXED_PRECISION_CHOICES:
        raise MixedPrecisionError(
            f"{source}: {requested!r} is not a mixed-precision mode; choose one of {MIXED_PRECISION_CHOICES}"
        )
    return mode


class _ProcessFact:
    """One of `PartialState`'s facts, read through an AcceleratorState.

    `__getattr__` reaches every other fact, but only after a failed lookup, whose exception cost 0.8
    us a read: the facts read on every step or collective (the facade's `num_processes`) come here.
    A name set on the shared dict still wins (this descriptor defines no `__set__`).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: AcceleratorState | None, owner: type) -> Any:
        if instance is None:
            return self
        partial = instance._shared_state.get("_partial")
        if partial is None:
            raise reset_error("AcceleratorState", self.name)
        return getattr(partial, self.name)


class AcceleratorState:
    """Shared singleton of the whole run: `PartialState`'s facts plus mixed precision."""

    _shared_state = SharedDict()
    mixed_precision: str
    _partial: PartialState
    num_processes = _ProcessFact()
    process_index = _ProcessFact()
    local_process_index = _ProcessFact()
    num_local_processes = _ProcessFact()
    device = _ProcessFact()
    distributed_type = _ProcessFact()
    use_distributed = _ProcessFact()
    is_main_process = _ProcessFact()
    is_local_main_process = _ProcessFact()
    is_last_process = _ProcessFact()

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool = False,
        timeout: datetime.timedelta | float | None = None,
        distributed_type: DistributedType | str | None = None,
        backend: str | None = None,
        init_method: str | None = None,
    ) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            if (
                mixed_precision is not None
                and resolve_mixed_precision(mixed_precision) != self.mixed_precision
            ):
                raise MixedPrecisionError(
                    f"AcceleratorState already uses mixed_precision={self.mixed_precision!r}; "
                    f"cannot switch to {mixed_precision!r} (build one Accelerator per process)"
                )
            return
        # Validate before touching the shared dict, so a failed construction leaves nothing half-built.
        mode = resolve_mixed_precision(mixed_precision)
        partial = PartialState(
            cpu=cpu,
            timeout=timeout,
            distributed_type=distributed_type,
            backend=backend,
            init_method=init_method,
        )
        # Setting the process up may have given each thread its own state (XLA replicas): use it.
        self.__dict__ = self._shared_state
        self.mixed_precision = mode
        self._partial = partial

    @property
    def initialized(self) -> bool:
        """Whether the shared state was built in this process (in this thread, where replicas are threads)."""
        return "_partial" in self._shared_state

    @property
    def partial_state(self) -> PartialState:
        """The process facts this state extends (what a backend is built on)."""
        if "_partial" not in self._shared_state:
            raise reset_error("AcceleratorState", "partial_state")
        return self._shared_state["_partial"]

    def __reduce__(self) -> tuple[type, tuple[()]]:
        # A pickled copy unpickles as this process's shared state, not as a detached snapshot.
        return (type(self), ())

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """Forget the shared state (tests only)."""
        cls._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()

    def destroy_process_group(self, group: Any = None) -> None:
        """Tear down `group` (default: this job's process group); see PartialState."""
        PartialState().destroy_process_group(group)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the shared dict: the process facts.
        if name.startswith("__"):
            raise AttributeError(name)
        partial = self._shared_state.get("_partial")  # one lookup: reached on every process fact read
        if partial is None:
            # Every instance is built initialized, so an empty shared dict means it was reset since.
            raise reset_error("AcceleratorState", name)
        try:
            return getattr(partial, name)
        except StateResetError:
            raise
        except AttributeError:
            if hasattr(type(partial), name):
                raise  # a property of the process facts failed: its own error says why
            raise AttributeError(f"'AcceleratorState' object has no attribute '{name}'") from None

    def __repr__(self) -> str:
        return f"{self._partial!r}Mixed precision type: {self.mixed_precision}\n"
