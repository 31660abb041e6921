"""Accelerate's keyword arguments that hand an engine its plugin (`Accelerator(<keyword>=plugin)`),
and the `Accelerator` properties of the same names.

The facade names them in its signature and its properties only, and decides nothing about them:
this table says which distributed type each keyword runs, the one plugin given reaches the backend
untouched (`BackendOptions.plugin`), and each property returns the backend's plugin when the run
is of its keyword's type. An engine that needs no Accelerate keyword of its own adds nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_state import DistributedType

PLUGIN_ARGUMENTS: dict[str, DistributedType] = {
    "deepspeed_plugin": DistributedType.DEEPSPEED,
    "fsdp_plugin": DistributedType.FSDP,
}


def chosen_plugin(given: Mapping[str, Any]) -> tuple[Any, DistributedType | None]:
    """Return the one plugin among `given` (keyword -> argument) and the distributed type it runs,
    or (None, None); ValueError when two are given or a plugin is given under another type's keyword."""
    passed = {keyword: plugin for keyword, plugin in given.items() if plugin is not None}
    if len(passed) > 1:
        raise ValueError(f"Accelerator: pass one of {', '.join(passed)}, not several")
    if not passed:
        return None, None
    ((keyword, plugin),) = passed.items()
    wanted = PLUGIN_ARGUMENTS[keyword]
    own = getattr(plugin, "distributed_type", None)
    if own is not None and DistributedType(own) is not wanted:
        other = [name for name, kind in PLUGIN_ARGUMENTS.items() if kind is DistributedType(own)]
        instead = f"; pass it as {other[0]}=" if other else ""
        raise ValueError(
            f"Accelerator({keyword}=...): a {type(plugin).__name__} runs {DistributedType(own).value}, "
            f"not {wanted.value}{instead}"
        )
    return plugin, wanted


def plugin_of_run(keyword: str, distributed_type: DistributedType, plugin: Any) -> Any:
    """Return `plugin` (the backend's) when the run's `distributed_type` is `keyword`'s, else None."""
    return plugin if distributed_type is PLUGIN_ARGUMENTS[keyword] else None
