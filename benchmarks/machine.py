"""What the results were measured on: the machine and the versions of everything compared."""

from __future__ import annotations

import os
import platform
import re
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("torch", "accel", "accelerate", "deepspeed", "matplotlib")

# The instruction sets that choose torch's CPU kernels. A virtual machine may name its CPU only
# "AMD EPYC" on hosts of two generations: one without avx512_bf16 ran the bf16 MLP 6x and the bf16
# encoder 17x slower than one a day before, so a bf16 figure is only comparable on the same set.
KERNEL_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile")
# What tells two machines apart in results (`report.check_comparable`).
IDENTITY = ("hostname", "cpu", "cores", "cpu_id", "isa")


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


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """Return the CPU's vendor, family, model and stepping (`cpu_id`) and which of `KERNEL_ISA` it
    has (`isa`, space-separated, "" for none) from Linux's cpuinfo; {} where there is none."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block describes them all
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "flags" not in fields:
        return {}
    parts = [fields.get("vendor_id", "")] + [
        f"{name} {fields[name]}" for name in ("cpu family", "model", "stepping") if name in fields
    ]
    flags = set(fields["flags"].split())
    return {
        "cpu_id": " ".join(part for part in parts if part).replace("cpu family", "family"),
        "isa": " ".join(name for name in KERNEL_ISA if name in flags),
    }


def label(machine: dict[str, Any]) -> str:
    """Return how results name the CPU: its model and, where recorded, its identity and kernel ISA."""
    if "cpu_id" not in machine:
        return str(machine.get("cpu", "?"))
    return f"{machine.get('cpu', '?')}, {machine['cpu_id']}, {machine['isa'] or 'no AVX2'}"


def cpu_times() -> list[int] | None:
    """Return the machine's CPU time counters so far (Linux's /proc/stat "cpu" line), or None."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    return [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal


def steal_percent(before: list[int] | None, after: list[int] | None) -> float | None:
    """Return the % of CPU time between two `cpu_times` that the hypervisor gave to other guests.

    On a shared virtual machine this is the noise no interleaving removes: every contender's
    rounds slow down and vary with it, so the README reports it beside the figures.
    """
    if before is None or after is None:
        return None
    spent = [later - earlier for earlier, later in zip(before, after, strict=True)]
    total = sum(spent)
    return round(100 * spent[7] / total, 1) if total > 0 else None


def describe() -> dict[str, str | int]:
    """Return hostname, CPU model (and identity, kernel ISA), core count and OS of this machine."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        **cpu_identity(),
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
