"""The job's device mesh: four named dimensions and the flattened ones FSDP and the data use.

Every dimension is in the mesh, a size-1 one too, so that `mesh["tp"]` and the flattened `dp`,
`dp_shard_cp` and `dp_cp` exist whatever the sizes: the code composing the dimensions never asks
which ones are enabled. A rank's place in the mesh is row-major: tp varies fastest, so the ranks of
one tp group are neighbours (on one machine, where tensor parallel's traffic belongs).
"""

from __future__ import annotations

from typing import Any

DIMENSIONS = ("dp_replicate", "dp_shard", "cp", "tp")  # the mesh's order, outermost first
FLATTENED = {
    "dp": ("dp_replicate", "dp_shard"),
    "dp_shard_cp": ("dp_shard", "cp"),
    "dp_cp": ("dp_replicate", "dp_shard", "cp"),
}


def build_mesh(sizes: dict[str, int], device_type: str) -> Any:
    """Return the DeviceMesh of `sizes` (one per dimension) over every process (collective), the
    flattened dimensions made."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = tuple(sizes[d] for d in DIMENSIONS)
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=DIMENSIONS)
    for name, dimensions in FLATTENED.items():
        mesh[dimensions]._flatten(name)
    return mesh


def data_parallel_place(mesh: Any) -> tuple[int, int]:
    """Return (how many data shards, which one this rank reads): its coordinate on `dp`."""
    dp = mesh["dp"]
    return dp.size(), dp.get_local_rank()


def sees_own_batch(mesh: Any) -> bool:
    """True on the one rank of each group of ranks that share a batch (coordinate 0 on cp and tp)."""
    return mesh["cp"].get_local_rank() == 0 and mesh["tp"].get_local_rank() == 0
