"""`ParallelismConfig`: the size of each dimension of the job's device mesh, with Accelerate's names.

The mesh's dimensions, outermost first, are `dp_replicate` (replicas of the model), `dp_shard`
(FSDP2 shards within a replica), `cp` (context parallel: the sequence split) and `tp` (tensor
parallel: each layer's matrices split). Their product is the world size. Ranks that differ only in
`cp` and `tp` see the same batch; the data is split over `dp_replicate x dp_shard`.

A size left unset is read from the launcher's variable (`accel launch --parallelism_config_tp_size
2`, `ACCEL_PARALLELISM_CONFIG_TP_SIZE`), else 1. Unlike Accelerate, `dp_replicate x tp` without
sharding is allowed (the replicas of a tensor parallel model, kept in step like DDP's).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from accel_state.environment import env_vars
from accel_state.parallelism.mesh import DIMENSIONS, build_mesh

SIZE_VARIABLES = {
    "dp_replicate": env_vars.PARALLELISM_DP_REPLICATE_SIZE,
    "dp_shard": env_vars.PARALLELISM_DP_SHARD_SIZE,
    "tp": env_vars.PARALLELISM_TP_SIZE,
    "cp": env_vars.PARALLELISM_CP_SIZE,
}
CP_NEEDS_CUDA = (  # why cp_size > 1 cannot run on the CPU
    "torch's context parallel needs CUDA attention kernels (the flash / memory-efficient "
    "scaled_dot_product_attention ones)"
)


class ParallelismConfigError(ValueError):
    """A parallelism config that cannot describe this job's mesh."""


@dataclasses.dataclass
class TorchTensorParallelConfig:
    """How the `tp` dimension splits the model.

    `tp_plan` maps module-name patterns (`*` stands for one name, e.g. a layer index) to a style:
    "colwise", "rowwise", "colwise_rep", "rowwise_rep", "sequence_parallel" (transformers'
    format). None: the model's own `tp_plan`, `_tp_plan` or `base_model_tp_plan`.
    """

    enable_async_tp: bool = False
    tp_plan: dict[str, str] | None = None


@dataclasses.dataclass
class TorchContextParallelConfig:
    """How the `cp` dimension splits sequences ("allgather" or "alltoall" of keys and values)."""

    cp_comm_strategy: str = "allgather"

    def __post_init__(self) -> None:
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise ParallelismConfigError(
                f"TorchContextParallelConfig.cp_comm_strategy is {self.cp_comm_strategy!r}; "
                "use 'allgather' or 'alltoall'"
            )


@dataclasses.dataclass
class ParallelismConfig:
    """The sizes of the mesh's dimensions (each at least 1; their product is the world size)."""

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    tp_handler: TorchTensorParallelConfig | None = None
    cp_handler: TorchContextParallelConfig | None = None
    device_mesh: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for dimension in DIMENSIONS:
            attribute = f"{dimension}_size"
            value = getattr(self, attribute)
            where = f"ParallelismConfig({attribute}=...)"
            if value is None:
                variable = SIZE_VARIABLES[dimension]
                text = os.environ.get(variable)
                where = variable
                try:
                    value = int(text) if text not in (None, "") else 1
                except ValueError:
                    raise ParallelismConfigError(f"{variable}={text!r} is not an integer") from None
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParallelismConfigError(
                    f"{where} is {value!r}; each size must be an integer of at least 1"
                )
            setattr(self, attribute, value)
        if self.size_of("tp") > 1 and self.tp_handler is None:
            self.tp_handler = TorchTensorParallelConfig()
        if self.size_of("cp") > 1 and self.cp_handler is None:
            self.cp_handler = TorchContextParallelConfig()

    # Sizes -------------------------------------------------------------------------------------
    def size_of(self, dimension: str) -> int:
        """Return the size of one of `DIMENSIONS`."""
        return int(getattr(self, f"{dimension}_size"))

    @property
    def total_size(self) -> int:
        """The number of processes the mesh spans: the product of the four sizes."""
        return self.data_parallel_size * self.non_data_parallel_size

    @property
    def data_parallel_size(self) -> int:
        """How many different batches one step sees: dp_replicate x dp_shard."""
        return self.size_of("dp_replicate") * self.size_of("dp_shard")

    @property
    def non_data_parallel_size(self) -> int:
        """How many ranks see the same batch: cp x tp."""
        return self.size_of("cp") * self.size_of("tp")

    @property
    def dp_replicate_enabled(self) -> bool:
        """True when there are replicas of the model (dp_replicate_size > 1)."""
        return self.size_of("dp_replicate") > 1

    @property
    def dp_shard_enabled(self) -> bool:
        """True when parameters are sharded within a replica (dp_shard_size > 1)."""
        return self.size_of("dp_shard") > 1

    @property
    def tp_enabled(self) -> bool:
        """True when layers are split over tensor parallel ranks (tp_size > 1)."""
        return self.size_of("tp") > 1

    @property
    def cp_enabled(self) -> bool:
        """True when sequences are split over context parallel ranks (cp_size > 1)."""
        return self.size_of("cp") > 1

    @property
    def fsdp_enabled(self) -> bool:
        """True when parameters are sharded (dp_shard or cp above 1)."""
        return self.dp_shard_enabled or self.cp_enabled

    @property
    def needs_mesh_backend(self) -> bool:
        """True when anything but plain replicas is asked: the run composes the mesh (else it is DDP)."""
        return self.dp_shard_enabled or self.tp_enabled or self.cp_enabled

    # Accelerate's dimension-name lists ----------------------------------------------------------
    @property
    def dp_dim_names(self) -> list[str]:
        """The enabled dimensions the data is split over."""
        return [d for d in ("dp_replicate", "dp_shard") if self.size_of(d) > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        """The enabled dimensions whose ranks see the same batch."""
        return [d for d in ("tp", "cp") if self.size_of(d) > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        """The enabled dimensions FSDP shards parameters over."""
        return [d for d in ("dp_shard", "cp") if self.size_of(d) > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        """The enabled dimensions a loss is averaged over."""
        return [d for d in ("dp_replicate", "dp_shard", "cp") if self.size_of(d) > 1]

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions `fully_shard` is given: ["dp_replicate", "dp_shard_cp"] or ["dp_shard_cp"]."""
        return (["dp_replicate"] if self.dp_replicate_enabled else []) + ["dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        """The enabled dimensions, data parallel first (Accelerate's list)."""
        return self.dp_dim_names + self.non_dp_dim_names

    def describe(self) -> str:
        """Return the sizes as one line: "dp_replicate=1 x dp_shard=2 x cp=1 x tp=2"."""
        return " x ".join(f"{d}={self.size_of(d)}" for d in DIMENSIONS)

    def check_world(self, num_processes: int, on_cpu: bool) -> None:
        """Raise ParallelismConfigError unless this mesh fits a job of `num_processes` processes."""
        if self.total_size != num_processes:
            raise ParallelismConfigError(
                f"ParallelismConfig spans {self.total_size} processes ({self.describe()}) but the job has "
                f"{num_processes}: the sizes' product must equal the number of processes"
            )
        if self.cp_enabled and on_cpu:
            raise ParallelismConfigError(f"cp_size is {self.size_of('cp')} on a CPU run: {CP_NEEDS_CUDA}")

    def build_device_mesh(self, device_type: str) -> Any:
        """Return (and keep as `device_mesh`) the job's mesh (see `accel_state.parallelism.mesh`)."""
        if self.device_mesh is None:
            self.device_mesh = build_mesh({d: self.size_of(d) for d in DIMENSIONS}, device_type)
        return self.device_mesh

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        """Return the mesh, built for `device_type` on first use (Accelerate's name)."""
        if self.device_mesh is None:
            if device_type is None:
                raise ParallelismConfigError(
                    "get_device_mesh: pass a device_type ('cpu', 'cuda') to build it"
                )
            return self.build_device_mesh(device_type)
        if device_type is not None and self.device_mesh.device_type != device_type:
            raise ParallelismConfigError(
                f"the device mesh was built for {self.device_mesh.device_type!r}, not {device_type!r}"
            )
        return self.device_mesh


def parallelism_from_environment() -> ParallelismConfig | None:
    """Return the config `accel launch --use_parallelism_config` asked for, or None when it asked none."""
    if os.environ.get(env_vars.USE_PARALLELISM_CONFIG, "").lower() not in ("1", "true", "yes"):
        return None
    return ParallelismConfig()
