"""What this environment lacks: a library that does not import, or a CUDA device. A figure that needs
one lists itself as skipped with the reason these return, instead of failing.

Each check runs in a child process, so that the runner stays lean (and an engine's import-time
side effects stay out of it).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from benchmarks import launchers

PROBE_TIMEOUT_S = 600


def missing_module(module: str, **env: str) -> str | None:
    """Return None when `module` imports in a child process (with `env` added), else why not."""
    if importlib.util.find_spec(module) is None:
        return f"`import {module}` fails here ({module} is not installed)"
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                           env=launchers.child_env(**env), timeout=PROBE_TIMEOUT_S)  # fmt: skip
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return f"`import {module}` fails here ({lines[-1] if lines else 'no output'})"


def missing_cuda() -> str | None:
    """Return None when a CUDA device is usable, else why not."""
    if not any(Path("/dev").glob("nvidia[0-9]*")) and not Path("/dev/kfd").exists():
        return "no CUDA device (no /dev/nvidia* or /dev/kfd on this machine)"
    check = "import torch; raise SystemExit(not torch.cuda.is_available())"
    probe = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                           env=launchers.child_env(), timeout=PROBE_TIMEOUT_S)  # fmt: skip
    return None if probe.returncode == 0 else "no CUDA device (torch.cuda.is_available() is False)"


def free_cuda_bytes() -> int | None:
    """Return the bytes free on CUDA device 0 as a child process finds them, or None if it cannot tell."""
    check = "import torch; print(torch.cuda.mem_get_info(0)[0])"
    probe = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                           env=launchers.child_env(), timeout=PROBE_TIMEOUT_S)  # fmt: skip
    try:
        return int(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else None
    except (IndexError, ValueError):
        return None
