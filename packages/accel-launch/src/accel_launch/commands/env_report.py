"""The text of `accel env`: versions, platform, devices and the effective config, for a bug report."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys

from accel_launch.config.effective import EffectiveConfig
from accel_launch.config.schema import SECTIONS
from accel_state.compilation.cache import compile_cache_dir
from accel_state.seam.launch_hook import launch_hooks

ACCEL_DISTRIBUTIONS = (
    "accel",
    "accel-state",
    "accel-data",
    "accel-amp",
    "accel-launch",
    "accel-big-modeling",
)


def distribution_version(name: str) -> str:
    """Return the installed version of distribution `name`, or "not installed"."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment_lines(config: EffectiveConfig, *, config_found: bool) -> list[str]:
    """Return the report, one fact per line, ready to paste into a bug report."""
    import torch

    lines = [
        "Copy-and-paste the text below in your bug report.",
        "",
        f"- Platform: {platform.platform()}",
        f"- Python version: {sys.version.split()[0]} ({sys.executable})",
        f"- torch version: {torch.__version__}",
    ]
    lines += [f"- {name} version: {distribution_version(name)}" for name in ACCEL_DISTRIBUTIONS]
    # Each engine's adapter and library, as its launch hook names them, by version only: importing
    # them is slow and may start runtimes.
    for module, dist in (pair for hook in launch_hooks().values() for pair in hook.reported):
        present = importlib.util.find_spec(module) is not None
        lines.append(f"- {dist} version: {distribution_version(dist) if present else 'not installed'}")
    lines.append(f"- CPU count: {os.cpu_count()}")
    lines.append(f"- Devices: {_devices(torch)}")
    lines.append(f"- torch.compile cache: {compile_cache_dir()} (set ACCEL_COMPILE_CACHE_DIR to move it)")
    state = "" if config_found else " (not found; defaults shown)"
    lines.append(f"- Config file: {config.path}{state}")
    lines.append("- Effective config:")
    lines += [f"    {line}" for line in config_lines(config)]
    return lines


def config_lines(config: EffectiveConfig) -> list[str]:
    """Return one `key: value  (source)` line per key that is set, in the table's order."""
    width = max(len(name) for name in config.values)
    lines = []
    for name, value in config.values.items():
        if name in config.overridden:
            lines.append(f"{name + ':':<{width + 1}} {value!r:<16} ({config.overridden[name]})")
            continue
        if value is None and config.sources[name] == "default":
            continue
        if name in SECTIONS:
            continue  # its keys are listed under their own names
        source = config.sources[name]
        if source == "env":
            source = f"env {config.env_names[name]}"
        lines.append(f"{name + ':':<{width + 1}} {value!r:<16} ({source})")
    return lines


def _devices(torch: object) -> str:
    cuda = torch.cuda  # type: ignore[attr-defined]
    if not cuda.is_available():
        return "CPU only (CUDA not available)"
    names = [cuda.get_device_name(index) for index in range(cuda.device_count())]
    return f"{len(names)} CUDA device(s): {', '.join(names)}"
