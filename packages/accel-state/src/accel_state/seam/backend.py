"""The Backend seam: one small protocol behind which every way of running (native torch,
DeepSpeed, XLA, FSDP) plugs in, chosen once per process.

A backend is registered as a factory (usually its class) for a `DistributedType`. The factory
sets the process up (joins the process group, picks the device: `PartialState` calls it once),
then builds the backend object for an `Accelerator`, which delegates every decision an engine may
take over: wrapping in `prepare`, backward (loss division and scaling), the optimizer step,
clipping, unwrapping, state dicts and checkpoint files.

Adapters register with `register_backend` or through the `accel.backends` entry-point group
(name: the DistributedType value, object: the factory), read only when a type nobody registered
is asked for. The built-in native backend is named below as a string, so this module imports
none of its implementations.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from accel_state.backends.native.ddp_comm_hooks import CommHookOptions
from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.launch_env import LaunchEnvironment
from accel_state.seam.communication import Communicator
from accel_state.seam.precision_protocol import FullPrecision, Precision
from accel_state.seam.prepared_objects import PreparedObjects

ENTRY_POINT_GROUP = "accel.backends"
_NATIVE = "accel_state.backends.native.backend:NativeBackend"
_BUILT_IN: dict[DistributedType, str] = {
    DistributedType.NO: _NATIVE,
    DistributedType.MULTI_CPU: _NATIVE,
    DistributedType.MULTI_GPU: _NATIVE,
    DistributedType.FSDP: "accel_state.backends.fsdp.backend:FsdpBackend",
}


@dataclass(frozen=True)
class ProcessSetup:
    """What setting a process up decided: its distributed type, device and how ranks talk."""

    distributed_type: DistributedType
    device: torch.device
    process_group_backend: str | None
    communicator: Communicator
    # This process's place in the job when the backend's runtime assigns it (XLA's replicas, which
    # may be threads no launcher variable describes); None: as the launcher's variables say.
    launch: LaunchEnvironment | None = None


@dataclass(frozen=True)
class ProcessGroupOptions:
    """What the user asked of the process group itself; None leaves the choice to the backend.

    `backend` names the torch.distributed backend ("gloo", "nccl"), `init_method` the rendezvous
    URL (`InitProcessGroupKwargs`).
    """

    backend: str | None = None
    init_method: str | None = None


@dataclass(frozen=True)
class ExplicitOption:
    """A run option the script or the launcher set explicitly, and where (for messages)."""

    value: Any
    source: (
        str  # e.g. "Accelerator(mixed_precision='bf16')", "--mixed_precision (ACCEL_MIXED_PRECISION=bf16)"
    )


@dataclass
class BackendOptions:
    """Everything a backend is built with besides the process facts.

    `ddp_kwargs` go to DistributedDataParallel and `ddp_comm_hook` is registered on each model
    wrapped in it; `plugin` carries an adapter's own configuration (a DeepSpeed config, an FSDP
    plugin) untouched by the facade.
    """

    precision: Precision = field(default_factory=FullPrecision)
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)
    ddp_comm_hook: CommHookOptions = field(default_factory=CommHookOptions)
    plugin: Any = None
    # Options set explicitly ("mixed_precision", "gradient_accumulation_steps"), for an engine whose
    # own config may set them too: it refuses a conflict instead of picking one silently.
    explicit: dict[str, ExplicitOption] = field(default_factory=dict)


class ProcessFacts(Protocol):
    """The process facts a backend reads (`PartialState` provides them)."""

    device: torch.device
    num_processes: int
    process_index: int
    distributed_type: DistributedType

    @property
    def use_distributed(self) -> bool: ...


@runtime_checkable
class Backend(Protocol):
    """What a way of running provides; the facade calls nothing else."""

    precision: Precision

    # What BackendDefaults gives a backend that does not say otherwise:
    @property
    def checkpoint_format(self) -> str:
        """The format of the model and optimizer files its save_checkpoint leaves ("torch"); a
        checkpoint loads only into a backend of its format."""

    @property
    def reshards_checkpoints(self) -> bool:
        """Whether its checkpoints load into a job of another process count (FSDP's sharded
        files); otherwise load_state refuses one."""

    # Whether every process holds and steps the whole model itself, so that its weights can be
    # averaged across processes (LocalSGD).
    replicates_model: bool
    # The engine plugin it runs with, or None (`Accelerator.deepspeed_plugin`/`fsdp_plugin`).
    deepspeed_plugin: Any
    fsdp_plugin: Any

    def to_host(self, data: Any) -> Any:
        """Return `data` with every tensor a file cannot hold where it lives (XLA's lazy tensors)
        copied to the host; `Accelerator.save` and `save_state` write through it."""

    def remake_loader(self, loader: Any, change: Callable[[Any], Any]) -> Any:
        """Return `change` applied to `loader`, inside the wrapper this backend's `prepare` put
        around it (XLA's device loader) and wrapped again (skip_first_batches)."""

    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Return the objects wrapped for this backend (DDP, engines, device loaders), same order.

        Optimizers and schedulers come raw; the facade wraps what is returned in its own
        AcceleratedOptimizer/AcceleratedScheduler, whose steps come back through this backend.
        """

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate `loss`: divide it by the accumulation steps and scale it as this backend does."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        """Apply a step of `optimizer` (a sync step); return its result and whether it was skipped."""

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Make `optimizer`'s gradients true gradients (undo loss scaling) before they are read."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Return a context in which gradients accumulate locally without being all-reduced."""

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Return a context whose next backward all-reduces `model`'s gradients, even inside `no_sync`."""

    def join(self, joinables: list[Any]) -> contextlib.AbstractContextManager:
        """Return a context in which ranks may run different numbers of steps."""

    def clip_grad_norm_(
        self,
        parameters: Iterable[torch.Tensor],
        max_norm: float,
        norm_type: float = 2.0,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> torch.Tensor | None:
        """Clip gradients to a total norm (unscaling `optimizers` first); return the norm before,
        or None where an engine clips inside its own step (DeepSpeed), when the norm is not known yet."""

    def clip_grad_value_(
        self,
        parameters: Iterable[torch.Tensor],
        clip_value: float,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> None:
        """Clamp every gradient element to [-clip_value, clip_value] (unscaling `optimizers` first)."""

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        """Return the context that runs code outside the model in the run's precision."""

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the user's module from inside whatever `prepare` wrapped it in."""

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Return the full (consolidated) state dict of a prepared model."""

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        """Load a full state dict, as `get_state_dict` returns it, into a prepared model."""

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """Write the objects this backend saves in its own format into `folder` (every rank calls it);
        return the objects left to the generic checkpoint code."""

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """Load what `save_checkpoint` wrote; return the objects left to the generic code."""

    @classmethod
    def teardown(cls) -> None:
        """Release, once at exit and before the process group goes, what this kind of backend keeps
        of the group outside its objects (accel_state.backends.teardown runs it)."""


class BackendDefaults:
    """The parts of `Backend` most backends leave as they are; a backend inherits this and
    overrides what its engine does differently, so the facade never asks whether it has them."""

    replicates_model: bool = False
    # Whether `join` lets ranks run different numbers of steps (torch's Join over DDP); where it is
    # False, join_uneven_inputs warns and does nothing, as Accelerate does outside multi-device DDP.
    supports_join: bool = False
    deepspeed_plugin: Any = None
    fsdp_plugin: Any = None

    @property
    def checkpoint_format(self) -> str:
        """ "torch": the model and optimizer files of save_state are the generic code's."""
        return "torch"

    @property
    def reshards_checkpoints(self) -> bool:
        """False: a checkpoint loads only into a job of the process count that saved it."""
        return False

    def to_host(self, data: Any) -> Any:
        """Return `data` as it is: files hold this backend's tensors where they live."""
        return data

    def remake_loader(self, loader: Any, change: Callable[[Any], Any]) -> Any:
        """Return `change(loader)`: this backend's `prepare` wraps no loader."""
        return change(loader)

    @classmethod
    def teardown(cls) -> None:
        """Nothing: the objects it handed to `release_at_exit` are all it holds of the group."""


class ReplicaLauncher(Protocol):
    """The optional `launch` method of a `BackendFactory` whose runtime starts a job's replicas
    itself (XLA's `torch_xla.launch`), which no torchrun-style launcher can do for it."""

    def __call__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...] = (),
        *,
        num_processes: int = 1,
        start_method: str = "spawn",
    ) -> list[Any]:
        """Run `function(*args)` on `num_processes` replicas; return each replica's result."""


class BackendFactory(Protocol):
    """What is registered for a distributed type: it sets processes up and builds backends.

    Optional methods, read through the functions that name them (a factory without one keeps working):
    `launch`, a `ReplicaLauncher` (`replica_launcher`); `manual_seed(seed: int) -> None`, which
    seeds the generators the backend's device draws from besides torch's (XLA's), for `set_seed`
    (`seed_backend_generators`).
    """

    per_thread_state: bool  # replicas are threads of one process: shared state per thread

    def is_available(self) -> bool:
        """Return True when the backend's libraries can be imported (imports lazily)."""

    def setup_process(
        self,
        launch: LaunchEnvironment,
        *,
        cpu: bool,
        timeout: datetime.timedelta,
        process_group: ProcessGroupOptions | None = None,
    ) -> ProcessSetup:
        """Join the job's process group (once) and choose this process's device.

        `process_group` is passed only when the user asked for something, so a factory that
        takes no such argument keeps working until a user does.
        """

    def __call__(self, state: Any, options: BackendOptions) -> Backend:
        """Build the backend object of one Accelerator."""


_registry: dict[DistributedType, BackendFactory] = {}


class BackendNotAvailableError(RuntimeError):
    """No backend is registered or installed for the requested distributed type."""


def register_backend(distributed_type: DistributedType | str, factory: BackendFactory) -> None:
    """Make `factory` the way to set up and build the backend for `distributed_type`."""
    _registry[DistributedType(distributed_type)] = factory


def _load_entry_point(distributed_type: DistributedType) -> BackendFactory | None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == distributed_type.value:
            return entry.load()
    return None


def _load_built_in(distributed_type: DistributedType) -> BackendFactory | None:
    target = _BUILT_IN.get(distributed_type)
    if target is None:
        return None
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def backend_factory(distributed_type: DistributedType | str) -> BackendFactory:
    """Return the factory registered for `distributed_type`, loading its adapter if needed."""
    distributed_type = DistributedType(distributed_type)
    factory = (
        _registry.get(distributed_type)
        or _load_built_in(distributed_type)
        or _load_entry_point(distributed_type)
    )
    name = distributed_type.value
    adapter = f"accel-{name.lower()}"
    where = f"the install line is in packages/{adapter}/README.md of the repository"
    if factory is None:
        raise BackendNotAvailableError(
            f"no backend is installed for distributed type {name}; "
            f"install its adapter package, {adapter} ({where})"
        )
    if not factory.is_available():
        needs = "torch's" if distributed_type in _BUILT_IN else f"{adapter}'s"
        hint = "" if distributed_type in _BUILT_IN else f" ({where})"
        raise BackendNotAvailableError(
            f"the backend of distributed type {name} ({type(factory).__name__}) cannot run here: a library "
            f"it needs is missing; check {needs} install{hint}"
        )
    _registry[distributed_type] = factory
    return factory


def replica_launcher(distributed_type: DistributedType | str) -> ReplicaLauncher:
    """Return the `launch` of `distributed_type`'s factory, for a type whose runtime starts its replicas."""
    distributed_type = DistributedType(distributed_type)
    launch: ReplicaLauncher | None = getattr(backend_factory(distributed_type), "launch", None)
    if launch is None:
        raise BackendNotAvailableError(
            f"the {distributed_type.value} backend does not start replicas itself; start its "
            "processes with accel launch"
        )
    return launch


def seed_backend_generators(distributed_type: DistributedType | str, seed: int) -> None:
    """Seed the generators `distributed_type`'s backend keeps besides torch's, through its
    factory's `manual_seed` when it has one (XLA's device generator); the others have none."""
    manual_seed: Callable[[int], None] | None = getattr(
        backend_factory(distributed_type), "manual_seed", None
    )
    if manual_seed is not None:
        manual_seed(seed)


def joins_uneven_inputs(distributed_type: DistributedType | str) -> bool:
    """Return whether the backend registered for `distributed_type` supports `join` (False if none is)."""
    try:
        factory = backend_factory(distributed_type)
    except BackendNotAvailableError:
        return False
    return bool(getattr(factory, "supports_join", False))


def create_backend(
    distributed_type: DistributedType | str, state: Any, options: BackendOptions | None = None
) -> Backend:
    """Return the backend object for `distributed_type` on the process described by `state`."""
    return backend_factory(distributed_type)(state, options or BackendOptions())
