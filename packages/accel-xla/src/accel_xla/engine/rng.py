"""XLA's random state: `set_seed`'s seed for the device's generator, and the seed in checkpoints
(one small JSON file per replica).

XLA draws random numbers on the device from a seed torch's own generator states do not hold
(`xm.get_rng_state`), so `set_seed` must seed it too, and `save_state` would otherwise resume
dropout and `torch.rand(device=xla)` with other numbers than an uninterrupted run. JSON, not
pickle: loading it runs no code.
"""

from __future__ import annotations

import json
from pathlib import Path

FILE = "xla_random_state_{rank}.json"

# A seed set before XLA's runtime started, for each replica's setup to apply (see seed_xla_generator).
_seed_at_setup: int | None = None


def seed_xla_generator(seed: int) -> None:
    """Seed this replica's XLA generator; before the runtime has started, at each replica's setup
    instead: seeding would start it, and `torch_xla.launch` refuses to start replicas after that
    (a notebook that seeds before `notebook_launcher`)."""
    global _seed_at_setup
    import torch_xla

    # torch_xla has no public way to ask whether its runtime started without starting it.
    if not torch_xla._XLAC._xla_runtime_is_initialized():
        _seed_at_setup = seed
        return
    _seed_at_setup = None
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(seed)


def apply_seed_at_setup() -> None:
    """Seed this replica's XLA generator with the seed set before the runtime started, if any."""
    if _seed_at_setup is not None:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(_seed_at_setup)


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
