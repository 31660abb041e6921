"""Memory budgets per device: what is free now, or the user's budget parsed and ordered."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

import torch

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.sizes import convert_file_size_to_int

Device = int | str


def available_host_memory() -> int:
    """Return the bytes of host memory available now (MemAvailable on Linux)."""
    try:
        # Optional, not a dependency: more portable when present.
        return int(importlib.import_module("psutil").virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def get_max_memory(max_memory: Mapping[Device, int | str] | None = None) -> dict[Device, int]:
    """Return a budget per device in bytes, GPUs first, then "mps", "cpu", "disk".

    Without `max_memory`, the free memory of every visible GPU and of the host. The user's mapping is
    never modified: a new dict is returned.
    """
    if max_memory is None:
        found: dict[Device, int] = {}
        for index in range(torch.cuda.device_count()):
            try:
                found[index] = int(torch.cuda.mem_get_info(index)[0])
            except RuntimeError:
                continue
        found["cpu"] = available_host_memory()
        return found
    parsed: dict[Device, int] = {}
    for key, value in max_memory.items():
        if isinstance(key, bool) or not (isinstance(key, int) or key in ("mps", "cpu", "disk")):
            if isinstance(key, str) and key.isdigit():
                key = int(key)
            else:
                raise BigModelingError(
                    f"max_memory names device {key!r}: use integers for GPUs, 'mps', 'cpu' or 'disk'"
                )
        try:
            parsed[key] = convert_file_size_to_int(value)
        except BigModelingError as error:
            raise BigModelingError(f"max_memory[{key!r}]: {error}") from None
    gpus = sorted(key for key in parsed if isinstance(key, int))
    return {key: parsed[key] for key in [*gpus, "mps", "cpu", "disk"] if key in parsed}
