"""XLA's random state in checkpoints: the seed of the device's generator, one small JSON file per replica.

XLA draws random numbers on the device from a seed torch's own generator states do not hold
(`xm.get_rng_state`), so `save_state` would otherwise resume dropout and `torch.rand(device=xla)`
with other numbers than an uninterrupted run. JSON, not pickle: loading it runs no code.
"""

from __future__ import annotations

import json
from pathlib import Path

FILE = "xla_random_state_{rank}.json"


class XlaCheckpointError(ValueError):
    """An XLA random state file that cannot be restored; the message names it."""


def save_xla_rng_state(folder: Path, rank: int) -> Path:
    """Write this replica's XLA generator seed into `folder`; return the file."""
    import torch_xla.core.xla_model as xm

    path = Path(folder) / FILE.format(rank=rank)
    path.write_text(json.dumps({"seed": int(xm.get_rng_state())}))
    return path


def load_xla_rng_state(folder: Path, rank: int) -> bool:
    """Restore this replica's XLA generator seed from `folder`; return False when it has no such file
    (a checkpoint written by another backend)."""
    path = Path(folder) / FILE.format(rank=rank)
    if not path.is_file():
        return False
    try:
        seed = json.loads(path.read_text())["seed"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise XlaCheckpointError(f"{path} cannot be restored: {error}") from error
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise XlaCheckpointError(f"{path} cannot be restored: the seed must be an integer of 0 or more")
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(seed)
    return True
