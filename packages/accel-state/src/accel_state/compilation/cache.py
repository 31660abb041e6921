"""Where compiled artifacts are kept, so that a second launch of a script starts warm.

Inductor caches its FX graphs and AOT autograd graphs on disk under TORCHINDUCTOR_CACHE_DIR (by
default a folder of /tmp, which a reboot or a tmp cleaner empties). accel points it at a folder of
the user's cache unless one is set: `ACCEL_COMPILE_CACHE_DIR`, else an existing TORCHINDUCTOR_CACHE_DIR,
else `$XDG_CACHE_HOME/accel/compile` (`~/.cache/accel/compile`). `accel env` shows it.
"""

from __future__ import annotations

import os
from pathlib import Path

from accel_state.environment import env_vars

INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"


def compile_cache_dir() -> Path:
    """Return the folder torch.compile's caches go to in this environment."""
    chosen = env_vars.read_str(env_vars.COMPILE_CACHE_DIR) or env_vars.read_str(INDUCTOR_CACHE_DIR)
    if chosen:
        return Path(chosen).expanduser()
    base = env_vars.read_str("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "accel" / "compile"


def use_compile_cache() -> Path:
    """Point inductor's on-disk caches at `compile_cache_dir()` (created) and return it."""
    folder = compile_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[INDUCTOR_CACHE_DIR] = str(folder)
    return folder
