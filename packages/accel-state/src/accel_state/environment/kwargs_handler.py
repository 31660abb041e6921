"""`KwargsHandler`: the base of the small config dataclasses that customise one part of a run.

As in Accelerate, a handler hands on only what the user changed (`to_kwargs`), so the defaults of
the object it configures stay in charge of everything else.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any


class KwargsHandler:
    """Base of the configuration dataclasses given to `Accelerator(kwargs_handlers=[...])`."""

    def to_dict(self) -> dict[str, Any]:
        """Return a deep copy of every field by name."""
        return {
            item.name: copy.deepcopy(getattr(self, item.name))
            for item in dataclasses.fields(self)  # type: ignore[arg-type]
        }

    def to_kwargs(self) -> dict[str, Any]:
        """Return the fields whose values differ from those of a default instance."""
        defaults = type(self)().to_dict()
        return {name: value for name, value in self.to_dict().items() if defaults.get(name) != value}
