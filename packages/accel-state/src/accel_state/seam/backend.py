"""The Backend seam: one small protocol behind which every way of running (plain torch, each
engine, each device runtime) plugs in, chosen once per process.

A backend is registered as a factory (usually its class) for a `DistributedType`. The factory
sets the process up (joins the process group, picks the device: `PartialState` calls it once),
then builds the backend object for an `Accelerator`, which delegates every decision an engine may
take over: wrapping in `prepare`, backward (loss division and scaling), the optimizer step,
clipping, unwrapping, state dicts and checkpoint files.

Every backend, accel-state's own included, is declared in its distribution's metadata under the
`accel.backends` entry-point group (name: the DistributedType value, object: the factory); the
group is read once per process, when a type nobody registered with `register_backend` is first
asked for. So this module names no backend and imports none: a new one edits only its own package.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch

from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.launch_env import LaunchEnvironment
from accel_state.seam.communication import Communicator
from accel_state.seam.precision_protocol import FullPrecision, Precision
from accel_state.seam.prepared_objects import PreparedObjects

ENTRY_POINT_GROUP = "accel.backends"
# The distribution this module belongs to: its backends need only torch.
_OWN_DISTRIBUTION = "accel-state"
T = TypeVar("T")


@dataclass(frozen=True)
class ProcessSetup:
    """What setting a process up decided: its distributed type, device and how ranks talk."""

    distributed_type: DistributedType
    device: torch.device
    process_group_backend: str | None
    communicator: Communicator
    # This process's place in the job when the backend's runtime assigns it (replicas that may be
    # threads no launcher variable describes); None: as the launcher's variables say.
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
class ProcessRequest:
    """What setting a process up is asked: where the launcher put it, whether on the CPU, how long
    a collective may wait, and what the user asked of the process group."""

    launch: LaunchEnvironment
    cpu: bool
    timeout: datetime.timedelta
    process_group: ProcessGroupOptions = ProcessGroupOptions()


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

    `plugin` is the user's configuration object of the engine the run asks for, handed over
    untouched; `engine_options` the options one backend defines for itself (how it wraps models,
    its communication hooks), one object per type: a backend reads the types it defines with
    `engine_option` and the seam knows none of them.
    """

    precision: Precision = field(default_factory=FullPrecision)
    plugin: Any = None
    # The job's `ParallelismConfig` when it composes a device mesh (sharding, tensor parallel).
    parallelism: Any = None
    engine_options: tuple[Any, ...] = ()
    # Options set explicitly ("mixed_precision", "gradient_accumulation_steps"), for an engine whose
    # own config may set them too: it refuses a conflict instead of picking one silently.
    explicit: dict[str, ExplicitOption] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.engine_options = tuple(self.engine_options)
        kinds = [type(option).__name__ for option in self.engine_options]
        twice = sorted({kind for kind in kinds if kinds.count(kind) > 1})
        if twice:
            raise ValueError(f"BackendOptions.engine_options: one object per type, got {twice[0]} twice")

    def engine_option(self, kind: type[T]) -> T | None:
        """Return the option object of type `kind` (a backend's own), or None when none was given."""
        for option in self.engine_options:
            if isinstance(option, kind):
                return option
        return None


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
        """Whether its checkpoints load into a job of another process count (sharded files);
        otherwise load_state refuses one."""

    # Whether every process holds and steps the whole model itself, so that its weights can be
    # averaged across processes (LocalSGD).
    replicates_model: bool
    # The plugin it runs with (`BackendOptions.plugin`, or the one it built from the launcher's
    # variables), or None; the facade returns it under Accelerate's property of its type.
    plugin: Any

    @property
    def plain_steps(self) -> bool:
        """Whether its backward is the loss's own (divided over an accumulation window) and its
        optimizer step the optimizer's own: nothing scaled, reduced or run by an engine. The facade
        and the optimizer wrapper then make those calls themselves, a frame fewer each a step."""

    def to_host(self, data: Any) -> Any:
        """Return `data` with every tensor a file cannot hold where it lives (a lazy device's)
        copied to the host; `Accelerator.save` and `save_state` write through it."""

    def data_layout(self) -> DataLayout | None:
        """None: every process reads batches of its own (the data is split over all of them)."""
        return None

    def remake_loader(self, loader: Any, change: Callable[[Any], Any]) -> Any:
        """Return `change` applied to `loader`, inside the wrapper this backend's `prepare` put
        around it (a device loader) and wrapped again (skip_first_batches)."""

    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Return the objects wrapped for this backend (data parallel wrappers, engines, device
        loaders), same order.

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
        or None where an engine clips inside its own step, when the norm is not known yet."""

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


@dataclass(frozen=True)
class DataLayout:
    """How the data is split when several processes share each batch (tensor or context parallel).

    `num_shards` groups of processes each read one shard; this process reads shard `shard_index`;
    the `ranks_per_shard` processes of a group have consecutive ranks (shard = rank // ranks_per_shard).
    """

    num_shards: int
    shard_index: int
    ranks_per_shard: int


class BackendDefaults:
    """The parts of `Backend` most backends leave as they are; a backend inherits this and
    overrides what its engine does differently, so the facade never asks whether it has them."""

    replicates_model: bool = False
    # Whether `join` lets ranks run different numbers of steps (torch's Join over its data parallel
    # wrapper); where it is False, join_uneven_inputs warns and does nothing, as Accelerate does.
    supports_join: bool = False
    plugin: Any = None

    @property
    def plain_steps(self) -> bool:
        """False: backward and optimizer steps go through this backend's own methods."""
        return False

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

    def data_layout(self) -> DataLayout | None:
        """None: every process reads batches of its own (the data is split over all of them)."""
        return None

    def remake_loader(self, loader: Any, change: Callable[[Any], Any]) -> Any:
        """Return `change(loader)`: this backend's `prepare` wraps no loader."""
        return change(loader)

    def compile_model(self, model: Any, plugin: Any) -> Any:
        """Return `model` (as `prepare` returned it) compiled in place as the TorchDynamoPlugin
        `plugin` says; an engine whose wrapper compiles itself overrides this."""
        from accel_state.compilation.apply import compile_model

        return compile_model(model, plugin)

    @classmethod
    def teardown(cls) -> None:
        """Nothing: the objects it handed to `release_at_exit` are all it holds of the group."""


class BackendFactory(Protocol):
    """What is registered for a distributed type: it sets processes up and builds backends.

    Optional methods, read through the functions that name them (a factory without one keeps working):
    `manual_seed(seed: int) -> None`, which
    seeds the generators the backend's device draws from besides torch's, for `set_seed`
    (`seed_backend_generators`).
    """

    per_thread_state: bool  # replicas are threads of one process: shared state per thread

    def is_available(self) -> bool:
        """Return True when the backend's libraries can be imported (imports lazily)."""

    def setup_process(self, request: ProcessRequest) -> ProcessSetup:
        """Join the job's process group (once) and choose this process's device.

        Factories written for accel 0.1 take `(launch, *, cpu, timeout[, process_group])`
        instead; `setup_process` below calls either.
        """

    def __call__(self, state: Any, options: BackendOptions) -> Backend:
        """Build the backend object of one Accelerator."""


_registry: dict[DistributedType, BackendFactory] = {}


class BackendNotAvailableError(RuntimeError):
    """No backend is registered or installed for the requested distributed type."""


def register_backend(distributed_type: DistributedType | str, factory: BackendFactory) -> None:
    """Make `factory` the way to set up and build the backend for `distributed_type`."""
    _registry[DistributedType(distributed_type)] = factory


@functools.cache
def _own_entry_points() -> dict[str, metadata.EntryPoint]:
    """The factories this package declares, by distributed type name: read from its own metadata
    alone (a millisecond), so that the common runs never scan every installed distribution."""
    try:
        declared = metadata.distribution(_OWN_DISTRIBUTION).entry_points
    except metadata.PackageNotFoundError:
        return {}
    return {entry.name: entry for entry in declared.select(group=ENTRY_POINT_GROUP)}


@functools.cache
def _installed() -> dict[str, metadata.EntryPoint]:
    """The factories declared by every installed distribution, by distributed type name (read
    once, when a type this package does not declare is asked for; its own come first)."""
    found = dict(_own_entry_points())
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry)
    return found


def _entry_point(name: str) -> metadata.EntryPoint | None:
    return _own_entry_points().get(name) or _installed().get(name)


def _distribution(entry: Any) -> str | None:
    dist = getattr(entry, "dist", None)
    return None if dist is None else dist.name


def backend_factory(distributed_type: DistributedType | str) -> BackendFactory:
    """Return the factory registered for `distributed_type`, loading its distribution's if needed."""
    distributed_type = DistributedType(distributed_type)
    name = distributed_type.value
    factory = _registry.get(distributed_type)
    if factory is None:
        entry = _entry_point(name)
        if entry is None:
            raise _not_installed(name)
        factory = entry.load()
    if not factory.is_available():
        declared_by = _declared_by(name)
        own = declared_by == _OWN_DISTRIBUTION
        needs = "torch's" if own else f"{declared_by}'s"
        hint = "" if own else f" ({_install_line(declared_by)})"
        raise BackendNotAvailableError(
            f"the backend of distributed type {name} ({type(factory).__name__}) cannot run here: a library "
            f"it needs is missing; check {needs} install{hint}"
        )
    _registry[distributed_type] = factory
    return factory


def _declared_by(name: str) -> str:
    """The distribution that declares the backend of type `name`; for one nobody declares, the
    adapter package it would be (`accel-<type>`)."""
    return _distribution(_entry_point(name)) or f"accel-{name.lower()}"


def _install_line(distribution: str) -> str:
    return f"the install line is in packages/{distribution}/README.md of the repository"


def _not_installed(name: str) -> BackendNotAvailableError:
    if not any(_distribution(entry) == _OWN_DISTRIBUTION for entry in _installed().values()):
        # Not even the backends of this package: its metadata predates them (an old editable install).
        return BackendNotAvailableError(
            f"no backend is installed for distributed type {name}, and {_OWN_DISTRIBUTION}'s installed "
            f"metadata declares none (entry-point group {ENTRY_POINT_GROUP}): reinstall {_OWN_DISTRIBUTION}"
        )
    adapter = _declared_by(name)
    return BackendNotAvailableError(
        f"no backend is installed for distributed type {name}; "
        f"install its adapter package, {adapter} ({_install_line(adapter)})"
    )


def seed_backend_generators(distributed_type: DistributedType | str, seed: int) -> None:
    """Seed the generators `distributed_type`'s backend keeps besides torch's, through its
    factory's `manual_seed` when it has one (a device runtime's own generator); the others have none."""
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


def setup_process(factory: BackendFactory, request: ProcessRequest) -> ProcessSetup:
    """Return `factory`'s set-up of this process for `request`, in either form a factory takes."""
    parameters = inspect.signature(factory.setup_process).parameters
    if "request" in parameters or "cpu" not in parameters:
        return factory.setup_process(request)
    # accel 0.1's keyword form; `process_group` only when the user asked for something, so that a
    # factory without the parameter keeps working until a user does.
    extra: dict[str, Any] = {}
    if request.process_group != ProcessGroupOptions():
        extra["process_group"] = request.process_group
    legacy: Any = factory.setup_process
    return cast(ProcessSetup, legacy(request.launch, cpu=request.cpu, timeout=request.timeout, **extra))
