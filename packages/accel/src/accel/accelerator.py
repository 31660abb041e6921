"""`Accelerator`: the facade a training script talks to.

It resolves options, keeps one registry of prepared objects (`PreparedObjects`) and delegates:
to one backend, chosen once behind the `Backend` seam of accel_state, which is handed the
precision policy (accel_amp) as an object. It branches on neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import torch
from torch.utils.data import DataLoader

from accel.checkpointing.registry import CheckpointRegistry
from accel.options.accumulation import resolve_accumulation_plugin
from accel.options.compilation import resolve_dynamo_plugin
from accel.options.dataloader_config import DataLoaderConfiguration
from accel.options.explicit import explicit_options
from accel.options.handlers import KwargsHandlers
from accel.options.kwargs_handlers import AutocastKwargs, ProfileKwargs
from accel.options.parallelism import MESH_TYPE, requested_parallelism, settle_for_job
from accel.options.plugin_arguments import chosen_plugin, plugin_of_run
from accel.options.project_config import ProjectConfiguration
from accel.tracking.methods import ExperimentTracking
from accel.training.object_kinds import DATA_LOADER, MODEL, OPTIMIZER, SCHEDULER, kind_of, optimizers_of
from accel.training.process_control import ProcessControl
from accel.training.profiling import profile as _profile
from accel.training.triggers import TrainingTriggers
from accel_amp import AcceleratedOptimizer, AcceleratedScheduler, precision_policy
from accel_state import (
    AcceleratorState,
    DistributedType,
    GradientAccumulationPlugin,
    GradientState,
    KwargsHandler,
    PreparedObjects,
    create_backend,
    joins_uneven_inputs,
)
from accel_state.collectives import operations as _collectives
from accel_state.compilation.apply import compile_kwargs, is_compiled
from accel_state.compilation.plugin import DynamoBackend, TorchDynamoPlugin
from accel_state.environment.memory import release_memory
from accel_state.parallelism.config import ParallelismConfig


class Accelerator(ProcessControl, TrainingTriggers, ExperimentTracking):
    """Runs a plain PyTorch training loop on whatever the launcher set up."""

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool | None = None,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool = False,
        rng_types: list[str] | None = None,
        even_batches: bool | None = None,
        step_scheduler_with_optimizer: bool = True,
        dataloader_config: DataLoaderConfiguration | None = None,
        timeout: datetime.timedelta | float | None = None,
        ddp_kwargs: dict[str, Any] | None = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        kwargs_handlers: list[KwargsHandler] | None = None,
        log_with: Any = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        parallelism_config: ParallelismConfig | None = None,
        dynamo_backend: DynamoBackend | str | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
    ) -> None:
        """A plugin argument (Accelerate's keywords, `accel.options.plugin_arguments`) runs the job on its
        engine; like every backend plugin it names its distributed type and reaches the backend
        untouched."""
        handlers = KwargsHandlers.from_list(kwargs_handlers)
        self.dynamo_plugin = resolve_dynamo_plugin(dynamo_backend, dynamo_plugin)
        self.ddp_handler = handlers.ddp_handler
        self.scaler_handler = handlers.scaler_handler
        self.init_handler = handlers.init_handler
        self.autocast_handler = handlers.autocast_handler
        self.profile_handler = handlers.profile_handler
        self.fp8_recipe_handler = None  # Accelerate's name; accel runs no fp8
        plugin = resolve_accumulation_plugin(gradient_accumulation_steps, gradient_accumulation_plugin)
        state_kwargs = handlers.state_kwargs(timeout)
        backend_plugin, wanted_type = chosen_plugin(
            {"deepspeed_plugin": deepspeed_plugin, "fsdp_plugin": fsdp_plugin}
        )
        parallelism, wanted_type = requested_parallelism(parallelism_config, backend_plugin, wanted_type)
        self.state = AcceleratorState(
            mixed_precision=mixed_precision, cpu=cpu, distributed_type=wanted_type, **state_kwargs
        )
        if wanted_type is not None and self.state.distributed_type != wanted_type:
            raise RuntimeError(
                f"{type(backend_plugin).__name__} asks for a {wanted_type.value} run, but this process was "
                f"already set up as {self.state.distributed_type.value} (a PartialState built earlier): "
                "build "
                "the Accelerator first, or launch with the matching `accel launch` flags"
            )
        settle_for_job(parallelism, self.state.num_processes, self.state.device.type)
        self.parallelism_config = parallelism
        self.device_placement = device_placement
        config = dataclasses.replace(dataloader_config or DataLoaderConfiguration())
        if split_batches is not None:
            config.split_batches = split_batches
        if even_batches is not None:
            config.even_batches = even_batches
        self.dataloader_config = config
        self.rng_types = rng_types
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.gradient_state = GradientState(gradient_accumulation_plugin=plugin)
        precision = precision_policy(self.state.mixed_precision, self.device, **handlers.precision_kwargs())
        options = handlers.backend_options(precision, ddp_kwargs)
        options.plugin = backend_plugin
        options.parallelism = parallelism if wanted_type is MESH_TYPE else None
        options.explicit = explicit_options(
            mixed_precision, gradient_accumulation_steps, gradient_accumulation_plugin
        )
        self.backend = create_backend(self.state.distributed_type, self.state.partial_state, options)
        self._plain_backward = self.backend.plain_steps  # the precision (its scaler) is settled here
        # An engine with its own config may settle the precision (its JSON): the state reports it.
        self.state.mixed_precision = self.backend.precision.mode
        self.step = 0
        self.prepared = PreparedObjects()
        self.project_configuration = project_config or ProjectConfiguration(project_dir=project_dir)
        if project_dir is not None and project_config is not None:
            self.project_configuration.set_directories(project_dir)
        self._set_up_tracking(log_with)
        self._checkpoint_registry = CheckpointRegistry()

    # The run's options -----------------------------------------------------------------------
    @property
    def mixed_precision(self) -> str:
        """The precision the run uses: `no`, `fp16` or `bf16` (what an engine's own config settled)."""
        return self.state.mixed_precision

    @property
    def deepspeed_plugin(self) -> Any:
        """The backend's plugin on a run of this keyword's type (None otherwise), as Accelerate names it."""
        return plugin_of_run("deepspeed_plugin", self.distributed_type, self.backend.plugin)

    @property
    def fsdp_plugin(self) -> Any:
        """The backend's plugin on a run of this keyword's type (None otherwise), as Accelerate names it."""
        return plugin_of_run("fsdp_plugin", self.distributed_type, self.backend.plugin)

    @property
    def is_fsdp2(self) -> bool:
        """True when the run has an `fsdp_plugin` (accel's sharded runs are all of the second version)."""
        return self.fsdp_plugin is not None

    @property
    def torch_device_mesh(self) -> Any:
        """The job's DeviceMesh with Accelerate's dimension names (`dp_replicate`, `dp_shard`, `cp`,
        `tp`, and the flattened `dp`, `dp_shard_cp`, `dp_cp`); None without a `parallelism_config`."""
        import torch.distributed as dist

        if self.parallelism_config is None or not dist.is_initialized():
            return None
        return self.parallelism_config.get_device_mesh(self.device.type)

    def maybe_context_parallel(
        self,
        buffers: list[torch.Tensor] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        """A region in which `buffers` are split along `buffer_seq_dims` over the mesh's `cp` ranks
        and attention runs as ring attention (CUDA, cp_size > 1); a plain region otherwise, so the
        same loop runs with and without context parallel."""
        from accel_state.parallelism.context_parallel import context_parallel_region

        return context_parallel_region(
            self.parallelism_config, self.torch_device_mesh, buffers, buffer_seq_dims, no_restore_buffers
        )

    @property
    def split_batches(self) -> bool:
        """Whether each loader's batch size is the global one, split between the processes."""
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        """Whether the last batch is completed from the start so every process gets one."""
        return self.dataloader_config.even_batches

    @property
    def dispatch_batches(self) -> bool | None:
        """Whether the main process loads every batch and sends each process its part (None: only
        for iterable datasets), from `dataloader_config`."""
        return self.dataloader_config.dispatch_batches

    @property
    def non_blocking(self) -> bool:
        """Whether batches are copied to the device without waiting (pinned memory), from
        `dataloader_config`."""
        return self.dataloader_config.non_blocking

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step inside `accumulate()`; settable to a positive int."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        # Scripts that find their batch size at run time set it (Accelerate allows it).
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be a positive integer, got {steps!r}")
        self.gradient_state.num_steps = steps

    @property
    def sync_gradients(self) -> bool:
        """Whether this step all-reduces and steps (False on the k-1 accumulation steps)."""
        return self.gradient_state.sync_gradients

    @property
    def precision(self) -> Any:
        """The precision policy the backend computes with (an engine may bring its own)."""
        return self.backend.precision

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The fp16 `GradScaler` of the run, or None when nothing scales the loss."""
        return self.precision.scaler

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped (fp16 overflow)."""
        return any(opt.step_was_skipped for opt in self.prepared.optimizers)

    # The registry, under the names Accelerate scripts reach for.
    @property
    def _models(self) -> list[torch.nn.Module]:
        return self.prepared.models

    @property
    def _optimizers(self) -> list[AcceleratedOptimizer]:
        return self.prepared.optimizers

    @property
    def _schedulers(self) -> list[AcceleratedScheduler]:
        return self.prepared.schedulers

    @property
    def _dataloaders(self) -> list[DataLoader]:
        return self.prepared.data_loaders

    # Preparing the training objects --------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Return the objects ready for this set-up, in the order given (one object: not a tuple)."""
        self.state.distributed_type  # noqa: B018 - raises StateResetError after _reset_state()
        self.dynamo_plugin.check()  # a field set since it was made: one line before anything is wrapped
        if device_placement is None:
            device_placement = [self.device_placement] * len(args)
        if len(device_placement) != len(args):
            raise ValueError(
                f"prepare: device_placement has {len(device_placement)} entries for {len(args)} objects"
            )
        kinds = [kind_of(obj) for obj in args]
        result = list(args)
        batch = PreparedObjects()
        slots: dict[str, list[int]] = {MODEL: [], OPTIMIZER: [], SCHEDULER: [], DATA_LOADER: []}
        for i, (obj, kind) in enumerate(zip(args, kinds, strict=True)):
            if kind == DATA_LOADER:
                obj = self._shard_data_loader(obj, device_placement[i])
            elif kind == OPTIMIZER and isinstance(obj, AcceleratedOptimizer):
                continue  # prepared already
            elif kind not in slots:
                continue
            slots[kind].append(i)
            getattr(batch, kind).append(obj)
            batch.device_placement[id(obj)] = device_placement[i]
        prepared = self.backend.prepare(batch)
        if self.dynamo_plugin.enabled:  # after the backend wrapped them, in place (same objects)
            for model in prepared.models:
                self.backend.compile_model(model, self.dynamo_plugin)
        for kind, indices in slots.items():
            for i, obj in zip(indices, getattr(prepared, kind), strict=True):
                result[i] = obj
        optimizers = {i: obj for i, obj in enumerate(args) if isinstance(obj, AcceleratedOptimizer)}
        for i in slots[OPTIMIZER]:
            optimizers[i] = result[i] = AcceleratedOptimizer(
                result[i], device_placement[i], device=self.device, stepper=self.backend
            )
        for i in slots[SCHEDULER]:
            pool = optimizers or dict(enumerate(self.prepared.optimizers))
            result[i] = AcceleratedScheduler(
                result[i],
                optimizers_of(args[i], pool),
                step_with_optimizer=self.step_scheduler_with_optimizer,
                split_batches=self.split_batches,
            )
        for kind, indices in slots.items():
            getattr(self.prepared, kind).extend(result[i] for i in indices)
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None) -> torch.nn.Module:
        """Return `model` wrapped for this set-up (autocast forward, device, data parallel wrapper)."""
        return self.prepare(model, device_placement=[self._placement(device_placement)])

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        """Return `optimizer` wrapped so that it steps through the backend and only on sync steps."""
        return self.prepare(optimizer, device_placement=[self._placement(device_placement)])

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Return `scheduler` wrapped so that it follows the optimizer's real steps."""
        return self.prepare(scheduler)

    def prepare_data_loader(self, data_loader: Any, device_placement: bool | None = None) -> DataLoader:
        """Return `data_loader` sharded for this process, its batches placed on the device."""
        return self.prepare(data_loader, device_placement=[self._placement(device_placement)])

    def _placement(self, device_placement: bool | None) -> bool:
        return self.device_placement if device_placement is None else device_placement

    def _shard_data_loader(self, data_loader: Any, device_placement: bool) -> DataLoader:
        config = self.dataloader_config
        from accel_data import prepare_data_loader

        layout = self.backend.data_layout()
        return prepare_data_loader(
            data_loader,
            device=self.device,
            num_processes=None if layout is None else layout.num_shards,
            process_index=None if layout is None else layout.shard_index,
            split_batches=config.split_batches,
            put_on_device=device_placement,
            rng_types=self.rng_types,
            even_batches=config.even_batches,
            data_seed=config.data_seed,
            non_blocking=config.non_blocking,
            use_seedable_sampler=config.use_seedable_sampler,
            dispatch_batches=config.dispatch_batches,
            use_stateful_dataloader=config.use_stateful_dataloader,
        )

    def skip_first_batches(self, dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
        """Return a loader that resumes `dataloader`'s current epoch after `num_batches` batches.

        Skipped batches are never loaded; later epochs run in full from the original loader. A
        loader the backend wrapped (a device loader) skips inside its wrapper, wrapped again.
        """
        from accel_data import skip_first_batches

        return self.backend.remake_loader(dataloader, lambda loader: skip_first_batches(loader, num_batches))

    # The training step ----------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate `loss`, divided for gradient accumulation and scaled for fp16 (by the backend)."""
        gradient_state = self.gradient_state
        gradient_state.backward_calls += 1  # lets an optimizer tell whether gradients are pending
        if self._plain_backward:  # what the backend would do, less its frame: divide, no scaling
            steps = gradient_state.num_steps
            (loss if steps == 1 else loss / steps).backward(**kwargs)
        else:
            self.backend.backward(loss, **kwargs)

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Accumulate gradients locally on non-sync steps; all-reduce and step on sync steps.

        The step is decided here, at the `with`; the context returned is the models' own `no_sync`
        (or nothing to enter): no generator and no ExitStack of accel's on every batch.
        """
        gradient_state = self.gradient_state
        # Decided in line (no call of ours a batch): the last batch always steps, and the next
        # pass starts a fresh accumulation window.
        if gradient_state.sync_with_dataloader and gradient_state.end_of_dataloader:
            self.step = 0
            sync = True
        else:
            self.step += 1
            sync = self.step % gradient_state.num_steps == 0
        gradient_state.sync_gradients = sync
        # sync_each_batch: all-reduce every batch (no no_sync), still stepping every num_steps.
        if sync or (gradient_state.sync_each_batch and self.use_distributed):
            return _NOTHING_TO_ENTER
        if len(models) == 1:
            return self.backend.no_sync(models[0])
        return _entered_together([self.backend.no_sync(model) for model in models])

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Train on ranks with different numbers of batches: ranks that run out early shadow the
        others' collectives (torch's `Join`). `even_batches` overrides the prepared loaders' setting
        inside the block."""
        if not self.use_distributed:
            yield
            return
        # The state's type, not the backend's: Accelerate's tests reassign it to reach this branch.
        distributed_type = self.state.distributed_type
        if not joins_uneven_inputs(distributed_type):
            kind = DistributedType(distributed_type).value
            warnings.warn(
                "Joining uneven inputs is only supported for multi-GPU training, as a result "
                f"`join_uneven_inputs` will have no effect (distributed_type={kind}, whose backend "
                "cannot join; multi-CPU runs join too): give every rank the same number of batches "
                "(even_batches=True)",
                stacklevel=3,
            )
            yield
            return
        from accel_data import even_batches_overridden

        with even_batches_overridden(self.prepared.data_loaders, even_batches), self.backend.join(joinables):
            yield

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """Skip the gradient all-reduce inside the block."""
        with self.backend.no_sync(model):
            yield

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None, enabled: bool = True, **autocast_kwargs: Any
    ) -> contextlib.AbstractContextManager:
        """Return a context running code outside the model in the run's mixed precision.

        `autocast_handler`'s changed fields apply on top of the Accelerator's AutocastKwargs for
        this context (it can disable autocast, not re-enable one the Accelerator's disabled)."""
        if autocast_handler is not None:
            autocast_kwargs = {**autocast_handler.to_kwargs(), **autocast_kwargs}
            enabled = enabled and autocast_kwargs.pop("enabled", True)
        return self.backend.autocast(enabled, **autocast_kwargs)

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[torch.profiler.profile]:
        """Profile the block with torch's profiler (settings: `profile_handler`, else the
        Accelerator's ProfileKwargs); each rank writes a Chrome trace to its `output_trace_dir`."""
        with _profile(profile_handler or self.profile_handler or ProfileKwargs()) as profiler:
            yield profiler

    def unscale_gradients(self, optimizer: AcceleratedOptimizer | None = None) -> None:
        """Divide gradients by the fp16 loss scale (once per step); a no-op otherwise."""
        for opt in [optimizer] if optimizer is not None else self.prepared.optimizers:
            opt.unscale_gradients()

    def _raw_optimizers(self) -> list[torch.optim.Optimizer]:
        return [opt.optimizer for opt in self.prepared.optimizers]

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor | None:
        """Clip gradients (after unscaling) to `max_norm`; return their total norm before clipping
        (None under an engine that clips, and measures the norm, inside its own step)."""
        optimizers = self._raw_optimizers()
        return self.backend.clip_grad_norm_(parameters, max_norm, norm_type, optimizers=optimizers)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        """Clamp gradients (after unscaling) to [-clip_value, clip_value]."""
        self.backend.clip_grad_value_(parameters, clip_value, optimizers=self._raw_optimizers())

    # Collectives ----------------------------------------------------------------------------
    def gather(self, tensor: Any) -> Any:
        """Return every rank's tensors concatenated along dim 0."""
        return _collectives.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather, then drop the samples that `even_batches` repeated to pad the last batch."""
        # On first use: a script that never calls it never imports it. The plain form, unlike
        # `from accel.training import metrics`, runs no importlib function on later calls.
        import accel.training.metrics as metrics

        return metrics.gather_for_metrics(
            input_data, use_gather_object, self.num_processes, self.backend.data_layout()
        )

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Return `tensor` summed (`mean`, `max`, `min`) over the processes, times `scale`."""
        return _collectives.reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Return `tensor` padded along `dim` to the largest size on any process."""
        return _collectives.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    # Models and saving ----------------------------------------------------------------------
    def unwrap_model(
        self, model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool | None = None
    ) -> torch.nn.Module:
        """Return the user's module from inside its wrappers and compile (and the autocast forward,
        if asked); with `keep_torch_compile=True`, a model `prepare` compiled whole comes back
        compiled (torch.compile's wrapper around the user's module)."""
        compiled = is_compiled(model)
        model = self.backend.unwrap_model(model)
        if not keep_fp32_wrapper:
            self.precision.unwrap_forward(model)
        if keep_torch_compile and compiled and not is_compiled(model):
            return cast(torch.nn.Module, torch.compile(model, **compile_kwargs(self.dynamo_plugin, model)))
        return model

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Return `model`'s full state dict, consolidated from shards where the backend shards it."""
        return self.backend.get_state_dict(model)

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """Save `obj` to `f` from the main process only (safetensors for a flat tensor dict if asked)."""
        if not self.is_main_process:
            return
        obj = self.backend.to_host(obj)  # device tensors a file cannot hold are copied to the host
        if safe_serialization:
            from safetensors.torch import save_file

            save_file(obj, f, metadata={"format": "pt"})
        else:
            torch.save(obj, f)

    # Checkpoints ----------------------------------------------------------------------------
    @property
    def project_dir(self) -> str | os.PathLike[str] | None:
        """The project folder of `ProjectConfiguration` (where checkpoints and logs go), or None."""
        return self.project_configuration.project_dir

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named checkpoint gets (`checkpoint_<n>`)."""
        return self.project_configuration.iteration

    def save_state(self, output_dir: str | None = None, safe_serialization: bool = True) -> str:
        """Save models, optimizers, schedulers, scaler, RNG states, loader positions and registered
        objects atomically into `output_dir` (or the next `checkpoint_<n>`); return the folder."""
        from accel import checkpointing

        return checkpointing.save_state(self, output_dir, safe_serialization=safe_serialization)

    def load_state(self, input_dir: str | None = None, restore_dataloader_position: bool = False) -> str:
        """Restore what `save_state` wrote; return the folder loaded."""
        from accel import checkpointing

        return checkpointing.load_state(self, input_dir, restore_dataloader_position)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Include `objects` (each with state_dict/load_state_dict) in save_state/load_state."""
        self._checkpoint_registry.register_for_checkpointing(*objects)

    def register_save_state_pre_hook(self, hook: Callable) -> Any:
        """Call `hook(models, weights, output_dir)` before save_state writes the models."""
        return self._checkpoint_registry.register_save_state_pre_hook(hook)

    def register_load_state_pre_hook(self, hook: Callable) -> Any:
        """Call `hook(models, input_dir)` before load_state loads the models."""
        return self._checkpoint_registry.register_load_state_pre_hook(hook)

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Write `model`'s weights (from the main process) as sharded safetensors with an index."""
        from accel.checkpointing.weight_files import save_model

        save_model(self, model, save_directory, max_shard_size, safe_serialization)

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget the prepared objects, collect garbage and empty the device cache; reset `step`.

        Call it between two trainings with different objects. Returns `[None] * len(objects)`, to
        rebind the caller's references: `model, optimizer = accelerator.free_memory(model, optimizer)`.
        """
        self.prepared.clear()
        self._checkpoint_registry.custom_objects.clear()
        self.step = 0
        return release_memory(*objects)

    clear = free_memory

    def end_training(self) -> None:
        """Finish the trackers, then wait for every process so that none exits while others still
        communicate. Call it at the end of a script that logs."""
        self._finish_trackers()
        self.wait_for_everyone()


# What `accumulate` returns on a step that syncs: reusable, and entered at no cost.
_NOTHING_TO_ENTER = contextlib.nullcontext()


@contextlib.contextmanager
def _entered_together(contexts: list[contextlib.AbstractContextManager]) -> Iterator[None]:
    """Enter every context of `contexts` in order; leave them in reverse."""
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield
