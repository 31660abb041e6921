"""The XLA backend: PyTorch/XLA (TPU, or XLA's CPU device) behind accel's Backend seam.

XLA traces the loop lazily and runs it as compiled graphs. `prepare` moves models to the XLA
device (re-tying shared weights and pointing optimizers at the moved parameters) and wraps
loaders in `MpDeviceLoader`; the optimizer step averages gradients over the replicas, steps, and
ends the step's graph (`torch_xla.sync()`); collectives run through XLA's own (see
`accel_xla.engine.communicator`). Replicas may be threads of one process, so the shared state is per
thread. Nothing imports torch_xla before an XLA run is set up.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from accel_state.backends.common import BackendBase, check_precision_supported
from accel_state.backends.precision_steps import PrecisionSteps
from accel_state.seam.backend import BackendOptions, ProcessFacts, ProcessRequest, ProcessSetup
from accel_state.seam.prepared_objects import PreparedObjects
from accel_state.shared_state.gradient_state import GradientState
from accel_xla.engine.first_replica import copy_from_first_replica, model_tensors
from accel_xla.engine.host import to_host
from accel_xla.engine.placement import MovedParameters, move_model, parameters_of, rebind_optimizer
from accel_xla.engine.recompilation import RecompilationWatch
from accel_xla.engine.step_boundary import StepBoundary


class XlaConfigError(ValueError):
    """An option this XLA run cannot honour."""


class XlaBackend(PrecisionSteps, BackendBase):
    """One XLA device per replica; gradients averaged across replicas in the optimizer step, never
    in backward (no_sync has nothing to skip: accumulating is free)."""

    name = "XLA"

    per_thread_state = True  # on a CPU host (and TPU v2/v3) the replicas are threads of one process
    replicates_model = True  # every replica holds and steps the whole model

    @classmethod
    def is_available(cls) -> bool:
        return importlib.util.find_spec("torch_xla") is not None

    @classmethod
    def setup_process(cls, request: ProcessRequest) -> ProcessSetup:
        """Start XLA's runtime for this replica and return its device, rank and world size."""
        from accel_xla.engine.process_setup import setup_xla_process

        return setup_xla_process(request)

    @classmethod
    def launch(
        cls,
        function: Callable[..., Any],
        args: tuple[Any, ...] = (),
        *,
        num_processes: int = 1,
        start_method: str = "spawn",
    ) -> list[Any]:
        """Return `function(*args)` as each XLA replica computed it (`torch_xla.launch`; see
        `accel_xla.launch.replicas`): how `accel launch --xla` and `notebook_launcher` start replicas."""
        from accel_xla.launch.replicas import launch_replicas

        return launch_replicas(function, args, num_processes=num_processes, start_method=start_method)

    @classmethod
    def manual_seed(cls, seed: int) -> None:
        """Seed this replica's XLA generator (`set_seed`); before XLA's runtime has started, at
        each replica's setup (see `accel_xla.engine.rng`)."""
        from accel_xla.engine.rng import seed_xla_generator

        seed_xla_generator(seed)

    def __init__(self, state: ProcessFacts, options: BackendOptions | None = None) -> None:
        options = options or BackendOptions()
        # No loss scaling on XLA; bf16 keeps fp32's range.
        check_precision_supported(self.name, options.precision.mode, ("no", "bf16"), error=XlaConfigError)
        if options.plugin is not None:
            raise XlaConfigError(f"the XLA backend takes no plugin, got {type(options.plugin).__name__}")
        self.state = state
        self.precision = options.precision
        self.gradient_state = GradientState()
        self.moved = MovedParameters()
        self.recompilation = RecompilationWatch()
        self.step_boundary = StepBoundary()  # the step's sync spares the loaders theirs
        self._reduced: set[int] = set()  # optimizers whose gradients clipping already averaged

    # Preparing ---------------------------------------------------------------------------------
    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Move models to the XLA device (shared weights re-tied) with replica 0's weights on every
        replica, point optimizers at the moved parameters, and wrap loaders so that batches are
        uploaded in the background."""
        objects.models = [self._prepare_model(m, objects.places(m)) for m in objects.models]
        if self.state.num_processes > 1:
            # As DDP's wrap does: thread replicas share one host generator, so their models differ.
            placed = [m for m in objects.models if objects.places(m)]
            copy_from_first_replica(model_tensors(placed), self.state.process_index)
        for optimizer in objects.optimizers:
            rebind_optimizer(optimizer, self.moved)
        objects.data_loaders = [self._prepare_loader(d, objects.places(d)) for d in objects.data_loaders]
        return objects

    def _prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        self.precision.wrap_forward(model)
        if device_placement:
            move_model(model, self.state.device, self.moved)
        return model

    def _prepare_loader(self, loader: Any, device_placement: bool) -> Any:
        if not device_placement:
            return loader
        from accel_xla.data.device_loader import XlaDeviceLoader

        if isinstance(loader, XlaDeviceLoader):
            return loader
        return XlaDeviceLoader(
            loader, self.state.device, on_batch=self.recompilation.saw_batch, boundary=self.step_boundary
        )

    def remake_loader(self, loader: Any, change: Callable[[Any], Any]) -> Any:
        """Return `change` applied to the prepared loader inside `loader`'s device loader, in a
        device loader again (`skip_first_batches`); `change(loader)` for any other loader."""
        from accel_xla.data.device_loader import XlaDeviceLoader

        if not isinstance(loader, XlaDeviceLoader):
            return change(loader)
        return self._prepare_loader(change(loader.base_dataloader), device_placement=True)

    # The step ----------------------------------------------------------------------------------
    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        """Average the gradients over the replicas (unless clipping did), step, and run the step's graph."""
        import torch_xla

        if id(optimizer) in self._reduced:
            self._reduced.discard(id(optimizer))
        else:
            self._average_gradients(parameters_of(optimizer))
        result, skipped = self.precision.optimizer_step(optimizer, closure)
        torch_xla.sync()  # the step boundary: one graph per step, compiled once for a fixed shape
        self.step_boundary.mark()
        self.recompilation.after_step()
        return result, skipped

    def _average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        if self.state.num_processes < 2:
            return
        import torch_xla.core.xla_model as xm

        gradients = [p.grad for p in parameters if p.grad is not None]
        if gradients:
            xm.all_reduce(xm.REDUCE_SUM, gradients, scale=1.0 / self.state.num_processes, pin_layout=False)

    def before_clipping(
        self, parameters: list[torch.Tensor], optimizers: list[torch.optim.Optimizer]
    ) -> None:
        """Average the unscaled gradients over the replicas now, so that clipping sees the step's own;
        the optimizers' next step then does not average them again."""
        self._average_gradients(parameters)
        self._reduced.update(id(o) for o in optimizers)

    # Models and checkpoints --------------------------------------------------------------------
    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's state dict on the host (after running what is pending), shared weights shared."""
        return dict(to_host(super().get_state_dict(model)))

    def to_host(self, data: Any) -> Any:
        """`data` with its XLA tensors copied to the host (for `save` and `save_state`)."""
        return to_host(data)

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """Write this replica's XLA random state; every object is torch's, which the generic files
        hold (through to_host)."""
        from accel_xla.engine.rng import save_xla_rng_state

        save_xla_rng_state(folder, self.state.process_index)
        return prepared

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """Restore this replica's XLA random state (when the checkpoint has it); loading copies the
        generic files' host tensors into the device's parameters and state."""
        from accel_xla.engine.rng import load_xla_rng_state

        load_xla_rng_state(folder, self.state.process_index)
        return prepared
