"""Names that live in optional adapter packages (`accel[deepspeed]`), imported on first use.

`from accel import DeepSpeedPlugin` works where accel-deepspeed is installed and otherwise says
what to install; `import accel` never imports an adapter (or its engine) by itself.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> (module, extra that installs it)
ADAPTER_NAMES: dict[str, tuple[str, str]] = {
    "DeepSpeedPlugin": ("accel_deepspeed", "deepspeed"),
    "DummyOptim": ("accel_deepspeed", "deepspeed"),
    "DummyScheduler": ("accel_deepspeed", "deepspeed"),
    "DeepSpeedConfigError": ("accel_deepspeed", "deepspeed"),
}


def adapter_name(name: str, importer: str) -> Any:
    """Return `name` from its adapter; AttributeError (module `importer` has no such name) if unknown."""
    if name not in ADAPTER_NAMES:
        raise AttributeError(f"module {importer!r} has no attribute {name!r}")
    module, extra = ADAPTER_NAMES[name]
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:
        if error.name != module:
            raise
        raise ImportError(
            f"{name} comes with {module.replace('_', '-')}, which is not installed: "
            f"pip install 'accel[{extra}]'"
        ) from None
