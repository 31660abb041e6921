"""The FSDP2 backend: `torch.distributed.fsdp.fully_shard` behind the Backend seam, and the N-D
mesh of a `ParallelismConfig` composed around it.

`prepare` shards each model (the auto-wrap policy's submodules first, then the root) over one
device mesh of every process, re-binds optimizers built before `prepare` onto the sharded (DTensor)
parameters, and runs bf16 as FSDP's own `MixedPrecisionPolicy` (parameters all-gathered in bf16,
gradients reduced in fp32). Accumulation skips the reduce-scatter (`set_requires_gradient_sync`);
clipping measures the global norm over the shards. Pure torch: nothing to install.

With a `ParallelismConfig` the mesh has the four dimensions of `accel_state.parallelism.mesh`: the
tensor parallel plan splits the model over `tp` first, then `fully_shard` shards it over
`dp_shard_cp`, or over (`dp_replicate`, `dp_shard_cp`) as HSDP when there are replicas (a shard
group of one when `dp_shard` is 1: replicas of a tensor parallel model, reduced like DDP's, which
refuses DTensor parameters). Plain FSDP is the mesh (1, N, 1, 1).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch

from accel_state.backends.common import (
    BackendBase,
    check_precision_supported,
    join_job,
    left_to_generic_code,
    unwrap,
)
from accel_state.backends.fsdp import checkpoint as fsdp_checkpoint
from accel_state.backends.fsdp import fsdp1_options
from accel_state.backends.fsdp.exit_release import release_mesh_groups, release_parameter_groups
from accel_state.backends.fsdp.plugin import (
    SHARDED_STATE_DICT,
    FsdpConfigError,
    FullyShardedDataParallelPlugin,
)
from accel_state.backends.fsdp.wrap import apply_activation_checkpointing, modules_to_shard
from accel_state.backends.precision_steps import PrecisionSteps
from accel_state.backends.teardown import release_at_exit
from accel_state.environment.distributed_type import DistributedType
from accel_state.parallelism import mesh as nd_mesh
from accel_state.parallelism.config import ParallelismConfig
from accel_state.parallelism.tensor_parallel import apply_tensor_parallel, plan_of, resolve
from accel_state.seam.backend import BackendOptions, DataLayout, ProcessFacts, ProcessRequest, ProcessSetup
from accel_state.seam.communication import TorchCommunicator
from accel_state.seam.prepared_objects import PreparedObjects
from accel_state.shared_state.gradient_state import GradientState


class FsdpBackend(PrecisionSteps, BackendBase):
    """Every model fully sharded across all processes (FSDP2, DTensor parameters)."""

    name = "FSDP"  # fully_shard shards the user's module in place: no wrapper to unwrap
    per_thread_state = False
    replicates_model = False  # each process holds a shard: LocalSGD has nothing to average

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def setup_process(cls, request: ProcessRequest) -> ProcessSetup:
        """Pick the device and join the process group (a group of one for a lone process: FSDP needs one)."""
        device, group_backend = join_job(request, group_of_one=True)
        return ProcessSetup(DistributedType.FSDP, device, group_backend, TorchCommunicator())

    def __init__(self, state: ProcessFacts, options: BackendOptions | None = None) -> None:
        options = options or BackendOptions()
        plugin = options.plugin if options.plugin is not None else FullyShardedDataParallelPlugin()
        if not isinstance(plugin, FullyShardedDataParallelPlugin):
            raise TypeError(
                f"the FSDP backend needs a FullyShardedDataParallelPlugin, got {type(plugin).__name__}"
            )
        self.state = state
        self.plugin = self.fsdp_plugin = plugin
        self.precision = options.precision
        # fp16 would need a sharded gradient scaler, which FSDP2 lacks.
        check_precision_supported(self.name, self.precision.mode, ("no", "bf16"), error=FsdpConfigError)
        if plugin.cpu_offload and state.device.type == "cpu":
            raise FsdpConfigError(
                "cpu_offload (--fsdp_offload_params): FSDP's CPUOffloadPolicy needs a GPU run; on the CPU "
                "the parameters are in host memory already"
            )
        self.gradient_state = GradientState()
        self.parallelism: ParallelismConfig | None = options.parallelism
        if self.parallelism is not None and plugin.sharding_strategy in fsdp1_options.MESH_SHAPING:
            raise FsdpConfigError(
                f"sharding_strategy={plugin.sharding_strategy} and a ParallelismConfig both shape the mesh: "
                "give the sizes in the ParallelismConfig only (dp_replicate_size for replicas)"
            )
        self._mesh: Any = None
        # Each prepared model's original parameters -> its sharded ones, for optimizers built before.
        from torch.utils.weak import WeakIdKeyDictionary

        self._sharded_param: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._model_of_param: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._model_of_optimizer: dict[int, torch.nn.Module] = {}
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    @property
    def checkpoint_format(self) -> str:
        """ "fsdp-sharded" (torch.distributed.checkpoint folders) or "fsdp-full" (full state dicts)."""
        return "fsdp-sharded" if self.fsdp_plugin.state_dict_type == SHARDED_STATE_DICT else "fsdp-full"

    @property
    def reshards_checkpoints(self) -> bool:
        """A sharded checkpoint loads into a job of any process count (torch.distributed.checkpoint
        reshards it); ranks the saving job lacked keep their own random states."""
        return self.fsdp_plugin.state_dict_type == SHARDED_STATE_DICT

    # Preparing ---------------------------------------------------------------------------------
    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Shard every model, then point every optimizer (of this call or an earlier one) at the
        sharded parameters."""
        objects.models = [self._shard(model, objects.places(model)) for model in objects.models]
        self._optimizers.update(objects.optimizers)
        for optimizer in list(self._optimizers):
            self._rebind(optimizer)
        return objects

    def mesh(self) -> Any:
        """Return the device mesh over every process, built on first use: 1-D (every parameter
        sharded over all processes), or (replicas, shards) for FSDP1's NO_SHARD (one process per
        shard group) and HYBRID_SHARD (the processes of one node per shard group)."""
        if self._mesh is None and self.parallelism is not None:
            self._mesh = self.parallelism.build_device_mesh(self.state.device.type)
            release_at_exit(self, self._mesh, release_mesh_groups)
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape = self._mesh_shape()
            names = ("dp_replicate", "dp_shard") if len(shape) == 2 else None
            self._mesh = init_device_mesh(self.state.device.type, shape, mesh_dim_names=names)
            release_at_exit(self, self._mesh, release_mesh_groups)
        return self._mesh

    def _shard_mesh(self) -> Any:
        """The mesh `fully_shard` is given: all of it, or the N-D mesh's replica and shard dimensions."""
        if self.parallelism is None:
            return self.mesh()
        return self.mesh()[tuple(self.parallelism.fsdp_dim_names)]

    def data_layout(self) -> DataLayout | None:
        """The N-D mesh's data parallel place of this rank (None without a ParallelismConfig)."""
        if self.parallelism is None:
            return None
        num_shards, shard_index = nd_mesh.data_parallel_place(self.mesh())
        return DataLayout(num_shards, shard_index, self.parallelism.non_data_parallel_size)

    def _mesh_shape(self) -> tuple[int, ...]:
        strategy = self.fsdp_plugin.sharding_strategy
        count = self.state.num_processes
        if strategy == fsdp1_options.NO_SHARD:
            return (count, 1)
        if strategy in (fsdp1_options.HYBRID_SHARD, fsdp1_options.HYBRID_SHARD_ZERO2):
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or count)
            if per_node <= 0 or count % per_node:
                raise FsdpConfigError(
                    f"sharding_strategy={strategy} shards within each node: the {count} processes must be "
                    f"whole nodes of {per_node} (LOCAL_WORLD_SIZE) each"
                )
            return (count // per_node, per_node)
        return (count,)

    def _policies(self, root: bool, ignored: set[torch.nn.Parameter]) -> dict[str, Any]:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        plugin = self.fsdp_plugin
        kwargs: dict[str, Any] = {
            "mesh": self._shard_mesh(),
            "reshard_after_forward": plugin.reshard_after_forward,
        }
        if ignored:
            kwargs["ignored_params"] = ignored
        if plugin.mixed_precision_policy is not None:
            kwargs["mp_policy"] = plugin.mixed_precision_policy
        elif self.precision.autocast_dtype is not None:
            # The model's output comes back in fp32, as the native backend's bf16 forward returns it.
            kwargs["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=self.precision.autocast_dtype,
                reduce_dtype=torch.float32,
                output_dtype=torch.float32 if root else None,
            )
        if plugin.cpu_offload:
            kwargs["offload_policy"] = CPUOffloadPolicy()
        return kwargs

    def _shard(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        from torch.distributed.fsdp import FSDPModule, fully_shard

        inner = unwrap(model)
        if isinstance(inner, FSDPModule):
            release_at_exit(self, inner, release_parameter_groups)
            return model
        if not any(p.requires_grad for p in inner.parameters()):
            return model
        plugin = self.fsdp_plugin
        on_meta = any(t.is_meta for t in [*inner.parameters(), *inner.buffers()])
        if device_placement and not on_meta and not plugin.cpu_offload:
            inner.to(self.state.device)
        original = dict(inner.named_parameters())
        if on_meta and not plugin.cpu_ram_efficient_loading:
            raise FsdpConfigError(
                "a model on the meta device can be prepared only with cpu_ram_efficient_loading=True "
                "(--fsdp_cpu_ram_efficient_loading), which loads the main process's weights into it"
            )
        # Rank 0's weights become every rank's (as DDP broadcasts them): in place before the model is
        # split, so no rank holds a second copy; with cpu_ram_efficient_loading the other ranks may
        # hold the model on the meta device, and the main process's weights are sent once sharded.
        full: dict[str, torch.Tensor] | None = None
        if plugin.cpu_ram_efficient_loading:
            full = inner.state_dict() if self.state.process_index == 0 else {}
        else:
            _broadcast_from_main(inner)
        if self.parallelism is not None and self.parallelism.tp_enabled:
            handler = self.parallelism.tp_handler
            plan, source = plan_of(inner, handler.tp_plan if handler is not None else None)
            apply_tensor_parallel(inner, self.mesh()["tp"], resolve(inner, plan, source))
        groups = modules_to_shard(inner, plugin)
        ignored = fsdp1_options.ignored_parameters(inner, plugin.ignored_modules)
        if plugin.activation_checkpointing:
            apply_activation_checkpointing(groups or [inner])
        for module in groups:
            if not isinstance(module, FSDPModule):
                fully_shard(module, **self._policies(root=False, ignored=ignored))
        fully_shard(inner, **self._policies(root=True, ignored=ignored))
        release_at_exit(self, inner, release_parameter_groups)
        if on_meta:
            inner.to_empty(device="cpu" if plugin.cpu_offload else self.state.device)
        if full is not None:
            self._load_from_main(inner, full)
        sharded = dict(inner.named_parameters())
        for name, parameter in original.items():
            if name in sharded:
                self._sharded_param[parameter] = sharded[name]
        for parameter in sharded.values():
            self._model_of_param[parameter] = inner
        return model

    def _load_from_main(self, model: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, cast(dict[str, Any], full), options=options)

    def _rebind(self, optimizer: torch.optim.Optimizer) -> None:
        """Make `optimizer` step the sharded parameters (it was built on the originals); groups stay."""
        groups = [[self._sharded_param.get(p, p) for p in g["params"]] for g in optimizer.param_groups]
        moved = any(
            new is not old
            for params, group in zip(groups, optimizer.param_groups, strict=True)
            for new, old in zip(params, group["params"], strict=True)
        )
        if moved and optimizer.state:
            raise FsdpConfigError(
                f"{type(optimizer).__name__} already holds state for the unsharded parameters (it stepped "
                "before prepare); prepare it before its first step"
            )
        for params, group in zip(groups, optimizer.param_groups, strict=True):
            group["params"] = params
        found = [self._model_of_param.get(p) for g in optimizer.param_groups for p in g["params"]]
        owners = {id(m): m for m in found if m is not None}
        if len(owners) == 1:
            self._model_of_optimizer[id(optimizer)] = next(iter(owners.values()))

    def model_of(self, optimizer: Any) -> torch.nn.Module:
        """Return the sharded model whose parameters `optimizer` steps."""
        raw = getattr(optimizer, "optimizer", optimizer)
        model = self._model_of_optimizer.get(id(raw))
        if model is None:
            raise FsdpConfigError(
                f"{type(raw).__name__} does not step the parameters of exactly one prepared model; under "
                "FSDP each optimizer must belong to one model for its state to be saved"
            )
        return model

    # The step ----------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        return _gradient_sync(model, False)

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        return _gradient_sync(model, True)

    # Models and checkpoints --------------------------------------------------------------------
    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict, gathered on the main process's CPU (empty elsewhere; collective),
        or where the plugin's state_dict_config says (offload_to_cpu, rank0_only)."""
        plugin = self.fsdp_plugin
        return fsdp_checkpoint.full_model_state(
            self.unwrap_model(model),
            offload_to_cpu=plugin.state_dict_offload_to_cpu,
            rank0_only=plugin.state_dict_rank0_only,
        )

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        """Load a full state dict (every rank holds it) into the shards."""
        fsdp_checkpoint.load_full_model_state(self.unwrap_model(model), state_dict)

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        """Write the optimizers (and, sharded, the models) with torch.distributed.checkpoint."""
        sharded = self.fsdp_plugin.state_dict_type == SHARDED_STATE_DICT
        fsdp_checkpoint.save(self, prepared, folder, sharded=sharded)
        return self._left_to_generic_code(prepared, sharded)

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        sharded = self.fsdp_plugin.state_dict_type == SHARDED_STATE_DICT
        fsdp_checkpoint.load(self, prepared, folder, sharded=sharded)
        return self._left_to_generic_code(prepared, sharded)

    def _left_to_generic_code(self, prepared: PreparedObjects, sharded: bool) -> PreparedObjects:
        """All but the optimizers (and, sharded, the FSDP models), which FSDP's files hold."""
        from torch.distributed.fsdp import FSDPModule

        saved = {id(o) for o in prepared.optimizers}
        if sharded:
            saved |= {id(m) for m in prepared.models if isinstance(unwrap(m), FSDPModule)}
        return left_to_generic_code(prepared, lambda obj: id(obj) in saved)


def _broadcast_from_main(model: torch.nn.Module) -> None:
    """Overwrite every parameter and buffer of `model` with the main process's, in place (collective)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


_SYNC_FLAG = "_accel_requires_gradient_sync"  # what the innermost sync context asked, for nesting


@contextlib.contextmanager
def _gradient_sync(model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Reduce-scatter (sync) or keep (not sync) `model`'s gradients in the block's backwards."""
    from torch.distributed.fsdp import FSDPModule

    inner = unwrap(model)
    if not isinstance(inner, FSDPModule):
        yield
        return
    before = getattr(inner, _SYNC_FLAG, True)
    inner.set_requires_gradient_sync(sync)
    setattr(inner, _SYNC_FLAG, sync)
    try:
        yield
    finally:
        inner.set_requires_gradient_sync(before)
        setattr(inner, _SYNC_FLAG, before)
