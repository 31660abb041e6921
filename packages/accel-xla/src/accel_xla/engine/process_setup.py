"""Sets a process (or replica thread) up for XLA: its device, and its rank as XLA's runtime numbers it.

Under PJRT the runtime, not the launcher, knows the replicas: on a CPU host with
`CPU_NUM_DEVICES=2`, or on TPU v2/v3 chips, they are threads of one process, which no
`RANK`/`WORLD_SIZE` variable describes. So the ranks come from `torch_xla.runtime`.
"""

from __future__ import annotations

from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.launch_env import LaunchEnvironment
from accel_state.seam.backend import ProcessRequest, ProcessSetup
from accel_xla.engine.communicator import XlaCommunicator
from accel_xla.engine.rng import apply_seed_at_setup


def setup_xla_process(request: ProcessRequest) -> ProcessSetup:
    """Return this replica's XLA device and its place among the replicas; XLA's collectives carry
    every exchange, so no torch.distributed group is joined."""
    # `cpu` and `timeout` do not apply: the XLA device is the device, its collectives run in graphs.
    process_group = request.process_group
    if process_group.backend not in (None, "xla"):
        raise ValueError(
            f"an XLA run exchanges data through XLA's collectives; process group backend "
            f"{process_group.backend!r} (InitProcessGroupKwargs) cannot be used with it"
        )
    import torch_xla
    import torch_xla.runtime as xr

    device = torch_xla.device()
    apply_seed_at_setup()  # set_seed before the runtime started
    world_size = xr.world_size()
    local_world_size = max(world_size // max(xr.process_count(), 1), 1) if world_size > 1 else 1
    replicas = LaunchEnvironment(
        rank=xr.global_ordinal(),
        world_size=world_size,
        local_rank=xr.local_ordinal(),
        local_world_size=local_world_size,
        master_addr=request.launch.master_addr,
        master_port=request.launch.master_port,
        source="xla",
    )
    return ProcessSetup(DistributedType.XLA, device, "xla", XlaCommunicator(), launch=replicas)
