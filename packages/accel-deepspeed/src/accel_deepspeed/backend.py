"""The DeepSpeed backend: `deepspeed.initialize` behind accel's Backend seam.

The engine owns backward (loss division by the accumulation steps, loss scaling), the
all-reduce or reduce-scatter, clipping and the step. accel keeps what it means by accumulation:
`accumulate()` decides which backward is a sync step, and that decision becomes the engine's
gradient-accumulation boundary, so a run accumulates exactly as on the native backend. Nothing
here is imported before a DeepSpeed run is asked for, and deepspeed itself only inside methods.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from accel_deepspeed.config.errors import DeepSpeedConfigError
from accel_deepspeed.config.optimizer_sections import check_optimizer, check_scheduler
from accel_deepspeed.config.placeholders import DummyOptim, DummyScheduler
from accel_deepspeed.config.plugin import DeepSpeedPlugin
from accel_deepspeed.config.resolution import ResolvedConfig, fill_prepare_values, resolve_config
from accel_deepspeed.engine.objects import EnginePrecision, EngineScheduler
from accel_deepspeed.engine.process_setup import setup_deepspeed_process
from accel_deepspeed.engine.teardown import destroy_engine, drop_deepspeed_groups
from accel_deepspeed.engine.weights import consolidated_state_dict, load_full_state_dict
from accel_deepspeed.quiet_warnings import ignore_deepspeed_deprecations
from accel_state.backends.common import BackendBase, check_precision_supported, left_to_generic_code, unwrap
from accel_state.backends.teardown import release_at_exit
from accel_state.seam.backend import BackendOptions, ProcessFacts, ProcessRequest, ProcessSetup
from accel_state.seam.precision_protocol import Precision
from accel_state.seam.prepared_objects import PreparedObjects
from accel_state.shared_state.gradient_state import GradientState

# The folder inside an accel checkpoint that holds the engine's own checkpoint files.
ENGINE_CHECKPOINT = "deepspeed"


class DeepSpeedBackend(BackendBase):
    """One DeepSpeed engine per Accelerator: one model, its optimizer and (optionally) scheduler."""

    name = "DeepSpeed"
    per_thread_state = False
    checkpoint_format = "deepspeed"  # save_state holds the engine's own files, which only it reads

    @classmethod
    def is_available(cls) -> bool:
        return importlib.util.find_spec("deepspeed") is not None

    @classmethod
    def setup_process(cls, request: ProcessRequest) -> ProcessSetup:
        """Join the process group (a group of one for a lone process) and start DeepSpeed's comm on it."""
        return setup_deepspeed_process(request)

    def __init__(self, state: ProcessFacts, options: BackendOptions | None = None) -> None:
        options = options or BackendOptions()
        plugin = options.plugin if options.plugin is not None else DeepSpeedPlugin()
        if not isinstance(plugin, DeepSpeedPlugin):
            raise TypeError(f"the DeepSpeed backend needs a DeepSpeedPlugin, got {type(plugin).__name__}")
        self.state = state
        self.plugin = plugin
        self.resolved: ResolvedConfig = resolve_config(
            plugin,
            accumulation=options.explicit.get("gradient_accumulation_steps"),
            mixed_precision=options.explicit.get("mixed_precision"),
        )
        plugin.resolved_config = self.resolved.config
        # The JSON may set the accumulation steps: accumulate() must count with the engine's number.
        self.gradient_state = GradientState(
            gradient_accumulation_steps=self.resolved.gradient_accumulation_steps
        )
        _check_precision_supported(self.resolved.mixed_precision)
        self.precision: Precision = EnginePrecision(self.resolved.mixed_precision)
        self.engine: Any = None
        self._loader_batch_size: int | None = None
        self._clip_from_config = self.resolved.clipping_asked

    # Preparing ---------------------------------------------------------------------------------
    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Build the engine from the model, its optimizer and scheduler (one prepare() call)."""
        for loader in objects.data_loaders:
            self._loader_batch_size = self._loader_batch_size or _per_process_batch_size(loader, self.state)
        if len(objects.models) > 1:
            raise DeepSpeedConfigError(
                f"DeepSpeed runs one model per Accelerator; prepare() got {len(objects.models)}"
            )
        if len(objects.optimizers) > 1:
            raise DeepSpeedConfigError(
                f"DeepSpeed runs one optimizer per model; prepare() got {len(objects.optimizers)}"
            )
        dummies = [s for s in objects.schedulers if isinstance(s, DummyScheduler)]
        if not objects.models:
            if objects.optimizers or dummies:
                raise DeepSpeedConfigError(
                    "under DeepSpeed, prepare the model together with its optimizer and scheduler in one "
                    "prepare() call (the engine is built from all of them at once)"
                )
            return objects
        if self.engine is not None:
            raise DeepSpeedConfigError(
                "DeepSpeed runs one model per Accelerator; a model was prepared already"
            )
        optimizer = objects.optimizers[0] if objects.optimizers else None
        scheduler = dummies[0] if dummies else None
        engine, engine_optimizer, engine_scheduler = self._initialize(objects.models[0], optimizer, scheduler)
        objects.models = [engine]
        objects.optimizers = [engine_optimizer] if optimizer is not None else []
        objects.schedulers = [
            EngineScheduler(engine_scheduler) if s is scheduler else s for s in objects.schedulers
        ]
        return objects

    def _initialize(self, model: torch.nn.Module, optimizer: Any, scheduler: Any) -> tuple[Any, Any, Any]:
        ignore_deepspeed_deprecations()
        import deepspeed

        resolved = self.resolved
        check_optimizer(resolved, optimizer)
        check_scheduler(resolved, scheduler, optimizer)
        config = fill_prepare_values(
            resolved, micro_batch_size=self._loader_batch_size, world_size=self.state.num_processes
        )
        offload = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
        if optimizer is not None and not isinstance(optimizer, DummyOptim) and str(offload).lower() != "none":
            # DeepSpeed would otherwise refuse a client optimizer with an offloaded optimizer.
            config.setdefault("zero_force_ds_cpu_optimizer", False)
        arguments: dict[str, Any] = {"model": model, "config": config, "dist_init_required": False}
        if isinstance(optimizer, DummyOptim):
            arguments["model_parameters"] = optimizer.params
        elif optimizer is not None:
            arguments["optimizer"] = optimizer
        if isinstance(scheduler, DummyScheduler) and "scheduler" not in config:
            arguments["lr_scheduler"] = scheduler.lr_scheduler_callable
        engine, engine_optimizer, _, engine_scheduler = deepspeed.initialize(**arguments)
        if scheduler is not None and engine_scheduler is None:
            raise DeepSpeedConfigError("DeepSpeed built no scheduler from the DummyScheduler")
        self.engine = engine
        release_at_exit(self, engine, destroy_engine)
        return engine, engine_optimizer, engine_scheduler

    def _engine(self, action: str) -> Any:
        if self.engine is None:
            raise RuntimeError(
                f"{action} needs a model prepared under DeepSpeed; call accelerator.prepare(model, ...)"
            )
        return self.engine

    # The step ----------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        engine = self._engine("backward")
        if engine.optimizer is None:
            raise RuntimeError("backward under DeepSpeed needs an optimizer prepared with the model")
        # accumulate() decided whether this backward ends a window: the engine reduces and steps then.
        engine.set_gradient_accumulation_boundary(self.gradient_state.sync_gradients)
        engine.backward(loss, **kwargs)

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        if closure is not None:
            raise ValueError("DeepSpeed's engine steps without a closure; call optimizer.step() without one")
        engine = self._engine("optimizer.step()")
        engine.step()
        return None, not engine.was_step_applied()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        return None  # the engine unscales inside its step

    # no_sync and trigger_sync_in_backward do nothing (BackendBase): whether a backward reduces is
    # the engine's accumulation boundary, set in backward().

    def clip_grad_norm_(
        self,
        parameters: Iterable[torch.Tensor],
        max_norm: float,
        norm_type: float = 2.0,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> torch.Tensor | None:
        """Make the engine clip to `max_norm` in its step (it alone sees whole gradients under ZeRO).

        Returns None, as the norm is computed by that step (Accelerate does the same).
        """
        if float(norm_type) != 2.0:
            raise ValueError(f"DeepSpeed clips by the 2-norm only; clip_grad_norm_ got norm_type={norm_type}")
        engine = self._engine("clip_grad_norm_")
        configured = float(engine.gradient_clipping() or 0.0)
        if self._clip_from_config and configured != float(max_norm):
            raise DeepSpeedConfigError(
                f"clip_grad_norm_(max_norm={max_norm}) but {self.resolved.source} sets "
                f'"gradient_clipping": {configured}; clip in one place'
            )
        # The engine reads the clip value from its private config at each step; it has no setter.
        engine._config.gradient_clipping = float(max_norm)
        if hasattr(engine.optimizer, "clip_grad"):
            engine.optimizer.clip_grad = float(max_norm)
        return None

    def clip_grad_value_(
        self,
        parameters: Iterable[torch.Tensor],
        clip_value: float,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> None:
        raise ValueError(
            "DeepSpeed clips by norm only: use clip_grad_norm_ (or gradient_clipping in its config)"
        )

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        return self.precision.autocast(enabled, **autocast_kwargs)

    # Models and checkpoints --------------------------------------------------------------------
    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from deepspeed import DeepSpeedEngine  # not a class attribute `wrappers`: imported when used

        return unwrap(model, DeepSpeedEngine)

    def compile_model(self, model: Any, plugin: Any) -> Any:
        """Compile the engine's module in place, not the engine, as DeepSpeed's own `engine.compile`
        does: the engine's forward (its hooks, timers and ZeRO-3's parameter fetching) stays eager
        around the compiled module. Returns the engine."""
        super().compile_model(self.unwrap_model(model), plugin)
        return model

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict, gathered from every rank (collective): fp32 master weights, or the
        16-bit weights the model computes with when `zero3_save_16bit_model` is set."""
        sixteen_bit = bool(
            self.resolved.config.get("zero_optimization", {}).get("stage3_gather_16bit_weights_on_model_save")
        )
        return consolidated_state_dict(self.unwrap_model(model), sixteen_bit=sixteen_bit)

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        load_full_state_dict(self.unwrap_model(model), state_dict)

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """The engine writes its model, optimizer and scheduler states (every rank its own shard)."""
        if self.engine is None:
            return prepared
        self.engine.save_checkpoint(str(folder), tag=ENGINE_CHECKPOINT, save_latest=False)
        return self._left_to_generic_code(prepared)

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        if self.engine is None:
            return prepared
        if not (folder / ENGINE_CHECKPOINT).is_dir():
            raise DeepSpeedConfigError(
                f"{folder} holds no DeepSpeed engine checkpoint ({ENGINE_CHECKPOINT}/): "
                "it was not saved by a "
                "DeepSpeed run; load it with the backend that saved it"
            )
        loaded, _ = self.engine.load_checkpoint(
            str(folder), tag=ENGINE_CHECKPOINT, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if loaded is None:
            raise DeepSpeedConfigError(f"{folder / ENGINE_CHECKPOINT} could not be loaded by DeepSpeed")
        return self._left_to_generic_code(prepared)

    def _left_to_generic_code(self, prepared: PreparedObjects) -> PreparedObjects:
        """All but the engine, its optimizer and the scheduler it built, which its files hold."""
        engine_owned = {id(self.engine), id(self.engine.optimizer)}
        return left_to_generic_code(
            prepared, lambda obj: id(obj) in engine_owned or isinstance(obj, EngineScheduler)
        )

    @classmethod
    def teardown(cls) -> None:
        """Drop the process groups DeepSpeed keeps outside its engines (after they were destroyed)."""
        drop_deepspeed_groups()


def _check_precision_supported(mode: str) -> None:
    """Refuse, at Accelerator(), a precision DeepSpeed's accelerator cannot run (fp16 on the CPU)."""
    if mode == "no":
        return
    ignore_deepspeed_deprecations()
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    supported = ["no"] + [
        name
        for name, runs in (("bf16", accelerator.is_bf16_supported), ("fp16", accelerator.is_fp16_supported))
        if runs()
    ]
    where = f"DeepSpeed ({accelerator.device_name()} accelerator)"
    check_precision_supported(where, mode, supported, error=DeepSpeedConfigError)


def _per_process_batch_size(loader: Any, state: ProcessFacts) -> int | None:
    total = getattr(loader, "total_batch_size", None)
    if isinstance(total, int) and total > 0:
        return max(total // max(state.num_processes, 1), 1)
    size = getattr(loader, "batch_size", None)
    return size if isinstance(size, int) else None
