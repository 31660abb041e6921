"""The DataLoader arguments that a loader rebuilt from a user's loader carries over unchanged."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

KEPT_ARGUMENTS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def kept_arguments(loader: DataLoader) -> dict[str, Any]:
    """Return `loader`'s arguments named in KEPT_ARGUMENTS, as keywords for a new DataLoader."""
    kept = {name: getattr(loader, name) for name in KEPT_ARGUMENTS if hasattr(loader, name)}
    if loader.num_workers == 0:
        # DataLoader rejects these without workers.
        kept.pop("prefetch_factor", None)
        kept["persistent_workers"] = False
    kept["multiprocessing_context"] = getattr(loader, "_multiprocessing_context", None) or None
    return kept
