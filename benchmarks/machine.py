"""What the results were measured on: the machine and the versions of everything compared."""

from __future__ import annotations

import os
import platform
import re
import socket
from importlib import metadata

DISTRIBUTIONS = ("torch", "accel", "accelerate", "deepspeed", "matplotlib")


def cpu_model() -> str:
    """Return the CPU's model name (Linux's /proc/cpuinfo), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, str | int]:
    """Return hostname, CPU model, core count and OS of this machine."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "platform": platform.platform(terse=True),
    }


def versions() -> dict[str, str | None]:
    """Return the version of python and of each compared distribution (None where not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def slug(machine: dict[str, str | int]) -> str:
    """Return a file-name-safe name of `machine`: its hostname and core count."""
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(machine["hostname"])).strip("-.") or "machine"
    return f"{host}-{machine['cores']}cpu"
