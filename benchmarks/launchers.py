"""How each contender starts a job on CPU processes: raw PyTorch with torchrun, accel with
`accel launch --cpu`, Accelerate with torchrun and ACCELERATE_USE_CPU=true (its own
`accelerate launch --cpu --num_processes 2` starts one process)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from benchmarks.measurement import ACCEL, ACCELERATE, RAW

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).resolve().parent / "workers"


def child_env(**extra: str) -> dict[str, str]:
    """Return the environment of a benchmark job: one thread per process, no debug checks, and the
    repository on the path so that workers import `benchmarks.*`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}
    # Debug mode (set in test sessions) adds a collective per collective: not what users run.
    env.pop("ACCEL_DEBUG_MODE", None)
    # A user's interpreter caches bytecode; where the shell forbids it, every fresh process would
    # compile an editable install's modules again, charging each start for it (torch's are cached).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    # `accel launch` keeps a one-machine job's gloo on the loopback interface; so do the torchrun jobs,
    # lest raw PyTorch pay for a slower interface its host name resolves to.
    loopback = loopback_interface()
    if loopback is not None:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)
    return env


def loopback_interface() -> str | None:
    """Return the loopback interface's name (`lo` on Linux, `lo0` on macOS), if there is one."""
    try:
        names = {name for _, name in socket.if_nameindex()}
    except (AttributeError, OSError):
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def console(script: str, module: str) -> list[str]:
    """Return the command of a console script beside this interpreter, else `python -m module`."""
    beside = Path(sys.executable).with_name(script)
    return [str(beside)] if beside.exists() else [sys.executable, "-m", module]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun(processes: int) -> list[str]:
    """Return the torchrun command for `processes` local processes on a free loopback port."""
    return [*console("torchrun", "torch.distributed.run"), "--nproc_per_node", str(processes),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port())]  # fmt: skip


def accel_launch(processes: int) -> list[str]:
    return [
        *console("accel", "accel_launch.commands.cli"),
        "launch",
        "--cpu",
        "--num_processes",
        str(processes),
    ]


def launcher(contender: str, processes: int) -> tuple[list[str], dict[str, str]]:
    """Return the launcher command (the script follows it) and the env with which `contender` runs a job."""
    if contender == RAW:
        return torchrun(processes), child_env()
    if contender == ACCEL:
        return accel_launch(processes), child_env()
    if contender == ACCELERATE:
        return torchrun(processes), child_env(ACCELERATE_USE_CPU="true")
    raise ValueError(f"unknown contender {contender!r}")


def worker(name: str) -> str:
    """Return the path of a worker script in benchmarks/workers."""
    return str(WORKERS / name)
