"""How many worker processes this machine could start at all, so that an impossible count is refused up front.

Without it `--num_processes 100000` starts workers until the OS refuses a fork, then fails with
the agent's traceback while thousands of half-started ranks are torn down. The count is compared
with hard bounds only, not with what would be fast: more ranks than CPUs is slow but legitimate
(tests do it), so CPUs are no bound. Stdlib only: this runs before torch is imported.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from accel_launch.launch.options import LaunchOptionsError

# A worker is a Python interpreter that imports torch, which alone takes ~200 MiB resident; 64 MiB
# a process is a floor no machine gets below, so a count past memory / 64 MiB cannot run anywhere.
MIN_MEMORY_PER_PROCESS = 64 * 2**20
_PID_MAX = Path("/proc/sys/kernel/pid_max")


@dataclass(frozen=True)
class MachineLimits:
    """The bounds on the processes one machine can run; None where unknown or unlimited."""

    user_processes: int | None = None  # RLIMIT_NPROC (`ulimit -u`), not enforced for root
    process_ids: int | None = None  # the kernel's pid_max: processes of all users together
    memory_bytes: int | None = None  # physical memory


def machine_limits() -> MachineLimits:
    """Return this machine's limits (what cannot be read is None)."""
    return MachineLimits(_user_process_limit(), _pid_max(), _physical_memory())


def check_process_count(
    num_processes: int, limits: MachineLimits | None = None, *, where: str = "--num_processes"
) -> None:
    """Raise LaunchOptionsError when a machine with `limits` (default: this one) cannot run that many.

    `where` names where the count was set (the flag, or the config file's key).
    """
    limits = machine_limits() if limits is None else limits
    too_many = f"{where} {num_processes} is more than this machine can run"
    if not where.startswith("--"):
        too_many = f"{where} is {num_processes}, more than this machine can run"
    # The launcher (the elastic agent) is a process of the same user too.
    if limits.user_processes is not None and num_processes + 1 > limits.user_processes:
        raise LaunchOptionsError(
            f"{too_many}: the per-user process limit (ulimit -u, RLIMIT_NPROC) is {limits.user_processes}"
        )
    if limits.process_ids is not None and num_processes + 1 > limits.process_ids:
        raise LaunchOptionsError(
            f"{too_many}: the kernel hands out at most {limits.process_ids} process ids (kernel.pid_max)"
        )
    if limits.memory_bytes is not None:
        most = limits.memory_bytes // MIN_MEMORY_PER_PROCESS
        if num_processes > most:
            raise LaunchOptionsError(
                f"{too_many}: its {limits.memory_bytes / 2**30:.1f} GiB of memory hold at most {most} "
                f"processes of {MIN_MEMORY_PER_PROCESS // 2**20} MiB, less than a Python process with "
                "torch needs"
            )


def _user_process_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    if os.getuid() == 0:
        return None  # the kernel does not enforce RLIMIT_NPROC for root
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


def _pid_max() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return int(_PID_MAX.read_text().strip())
    except (OSError, ValueError):
        return None


def _physical_memory() -> int | None:
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None
