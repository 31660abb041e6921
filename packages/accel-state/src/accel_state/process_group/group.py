"""Starts the torch process group once per process and tears it down cleanly at exit.

Tearing down matters: a gloo job whose process group is still alive at interpreter exit can end
with SIGABRT ("terminate called without an active exception") after doing all of its work.
Measured here (2 ranks, DDP, gloo): 7 of 40 jobs aborted with a plain destroy at exit, before the
backends released what their prepared objects hold of the group (accel_state.backends.teardown, run
just before the destroy). With those releases, 0 of 40 aborted without a full garbage collection
first, which is why the teardown no longer runs one (it cost every rank 70-90 ms of its exit).

A group that outlives its destroy keeps gloo's threads running into the interpreter's final
teardown, where they can abort the process in the same way. torch.distributed.nn.functional binds
`group=group.WORLD` as default arguments when it is imported, and DDP imports it (through
torch._dynamo) after the group exists: those defaults then hold the group until the interpreter
ends, and destroy_process_group leaves its threads running. Importing it before the group exists
binds None instead (the default group, looked up at call time).

A group that already runs when the state is built (Ray Train's workers, a notebook launcher, a script
that called `init_process_group` itself) is adopted, not joined again: its rank and world size are
this process's place in the job, and its owner, not accel, tears it down.
"""

from __future__ import annotations

import atexit
import datetime
from collections.abc import Callable

import torch.distributed as dist

from accel_state.environment import env_vars
from accel_state.environment.launch_env import LaunchEnvironment, LaunchEnvironmentError, export_for_torch
from accel_state.process_group import group_timeout, rank_exit

_teardown_registered = False
_before_teardown: list[Callable[[], None]] = []


def adopt_running_group(found: LaunchEnvironment) -> LaunchEnvironment:
    """Return this process's place in the process group that already runs, else `found` unchanged.

    The group is the truth about rank and world size: a job whose group was made without launcher
    variables (`init_method="tcp://..."` and explicit ranks) would otherwise look like one process,
    train without DDP and read unsharded batches. Variables of a launcher that describe another
    place than the group's are a LaunchEnvironmentError, not a guess between the two.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return found
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if (found.rank, found.world_size) == (rank, world_size):
        return found
    if found.source != "python":  # a launcher's variables were read: they name another place
        raise LaunchEnvironmentError(
            f"the process group that already runs has this process at rank {rank} of {world_size}, but the "
            f"{found.source} environment says rank {found.rank} of {found.world_size}; build the Accelerator "
            "in the processes the group was made for, or make the group with the launcher's variables"
        )
    local_rank = env_vars.read_int(env_vars.LOCAL_RANK)
    local_world_size = env_vars.read_int(env_vars.LOCAL_WORLD_SIZE)
    # Without the launcher's local variables the ranks are taken to share one machine, the usual case
    # of a group made by hand; a GPU is then chosen by rank.
    return LaunchEnvironment(
        rank=rank,
        world_size=world_size,
        local_rank=rank if local_rank is None else local_rank,
        local_world_size=world_size if local_world_size is None else local_world_size,
        source="process group",
    )


def init_process_group(
    found: LaunchEnvironment,
    backend: str,
    timeout: datetime.timedelta,
    init_method: str | None = None,
) -> bool:
    """Join the job's process group unless one exists; return True if this call created it.

    `init_method` (a rendezvous URL) replaces the launcher's env:// rendezvous when given.
    """
    if dist.is_initialized():
        return False
    _bind_defaults_before_the_group_exists()
    export_for_torch(found)
    attempt = env_vars.read_int(env_vars.RESTART_COUNT)
    store: dist.Store | None = None
    if init_method is None and attempt is None:
        init_method = "env://"
    elif init_method is None:
        store = dist.PrefixStore(f"accel/attempt_{attempt}/", _elastic_store(found, timeout))
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        store=store,
        rank=found.rank,
        world_size=found.world_size,
        timeout=timeout,
    )
    group_timeout.apply_job_timeout(timeout)
    _register_teardown()
    return True


def init_single_process_group(backend: str, timeout: datetime.timedelta) -> bool:
    """Make this lone process a process group of one (for engines that need a group to exist);
    return True if this call created it. Its store lives in memory: no port is opened."""
    if dist.is_initialized():
        return False
    _bind_defaults_before_the_group_exists()
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    group_timeout.apply_job_timeout(timeout)
    _register_teardown()
    return True


def _bind_defaults_before_the_group_exists() -> None:
    """Import the torch module whose default arguments would otherwise capture the group (module
    docstring); a few milliseconds, paid once, and DDP imports it anyway."""
    import torch.distributed.nn.functional  # noqa: F401


def _elastic_store(found: LaunchEnvironment, timeout: datetime.timedelta) -> dist.Store:
    """Return the job's TCPStore, as torch's env:// rendezvous would open it.

    Under torchrun's static rendezvous the agent keeps one store across restarts of the worker
    group, so the keys of a failed attempt (peer addresses, barrier counts) are still there and a
    restarted group can hang or connect to dead peers; each attempt therefore gets its own prefix.
    """
    uses_agent_store = env_vars.read_str(env_vars.USE_AGENT_STORE) == str(True)
    return dist.TCPStore(
        host_name=str(found.master_addr),
        port=int(found.master_port or 0),
        world_size=found.world_size,
        is_master=not uses_agent_store and found.rank == 0,
        timeout=timeout,
        multi_tenant=not uses_agent_store,
    )


def _register_teardown() -> None:
    global _teardown_registered
    if not _teardown_registered:
        atexit.register(_teardown_at_exit)
        rank_exit.watch_uncaught_exceptions()
        _teardown_registered = True


def before_teardown(release: Callable[[], None]) -> None:
    """Run `release` at exit just before the process group is torn down (for an engine that keeps
    groups where the garbage collection cannot reach them, e.g. in its module globals)."""
    _before_teardown.append(release)


def _teardown_at_exit() -> None:
    # First, while the group is whole: the others, still in a collective, learn who left (and how).
    rank_exit.mark_exit()
    for release in reversed(_before_teardown):
        try:
            release()
        except Exception:  # noqa: BLE001 - at exit nothing is left to report it to; the group still goes
            pass
    destroy_process_group()


def destroy_process_group(group: dist.ProcessGroup | None = None) -> None:
    """Tear down `group` (default: the whole process group, which this process then leaves) if this
    process is in one; safe to call more than once."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group(group)
    if not (dist.is_available() and dist.is_initialized()):
        group_timeout.restore_default_timeout()
