"""`PreparedObjects`: the training objects of a run, sorted by kind.

One type serves twice: as what `Accelerator.prepare` hands a backend (with each object's device
placement) and as the facade's registry of everything prepared so far, which checkpoint hooks
receive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PreparedObjects:
    """Models, optimizers, schedulers and data loaders, each list in the order they were prepared."""

    models: list[torch.nn.Module] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    data_loaders: list[Any] = field(default_factory=list)
    # id(object) -> whether `prepare` moves it (or its state) to the device; absent means True.
    device_placement: dict[int, bool] = field(default_factory=dict, repr=False)

    def places(self, obj: Any) -> bool:
        """Return True when `obj` is to be put on the device."""
        return self.device_placement.get(id(obj), True)

    def extend(self, other: PreparedObjects) -> None:
        """Append `other`'s objects, kind by kind."""
        self.models.extend(other.models)
        self.optimizers.extend(other.optimizers)
        self.schedulers.extend(other.schedulers)
        self.data_loaders.extend(other.data_loaders)

    def clear(self) -> None:
        """Forget every object (so that they can be garbage collected)."""
        self.models.clear()
        self.optimizers.clear()
        self.schedulers.clear()
        self.data_loaders.clear()
        self.device_placement.clear()
