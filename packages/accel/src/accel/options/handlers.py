"""Turns `Accelerator(kwargs_handlers=[...])` into the options of the state, precision and backend.

The facade asks this module and hands the results on; it never inspects the handlers itself.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from accel.options.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from accel_state import BackendOptions, DdpOptions, KwargsHandler, Precision

# Accelerate's attribute name on the Accelerator for each handler type.
HANDLER_ATTRIBUTES: dict[type[KwargsHandler], str] = {
    DistributedDataParallelKwargs: "ddp_handler",
    GradScalerKwargs: "scaler_handler",
    InitProcessGroupKwargs: "init_handler",
    AutocastKwargs: "autocast_handler",
    ProfileKwargs: "profile_handler",
}


@dataclass(frozen=True)
class KwargsHandlers:
    """The handlers of one Accelerator, at most one of each type."""

    ddp_handler: DistributedDataParallelKwargs | None = None
    scaler_handler: GradScalerKwargs | None = None
    init_handler: InitProcessGroupKwargs | None = None
    autocast_handler: AutocastKwargs | None = None
    profile_handler: ProfileKwargs | None = None

    @classmethod
    def from_list(cls, handlers: list[KwargsHandler] | tuple[KwargsHandler, ...] | None) -> KwargsHandlers:
        """Return the handlers sorted by type; raise ValueError for a type given twice and
        TypeError for an object that is not a supported handler."""
        found: dict[str, KwargsHandler] = {}
        for handler in handlers or ():
            attribute = HANDLER_ATTRIBUTES.get(type(handler))
            if attribute is None:
                supported = ", ".join(kind.__name__ for kind in HANDLER_ATTRIBUTES)
                raise TypeError(
                    f"kwargs_handlers: unsupported handler {handler!r}; pass instances of {supported}"
                )
            if attribute in found:
                raise ValueError(
                    f"You can only pass one {type(handler).__name__} in `kwargs_handlers` (got two)."
                )
            found[attribute] = handler
        return cls(**found)

    def state_kwargs(self, timeout: datetime.timedelta | float | None) -> dict[str, Any]:
        """Return the process-group arguments of AcceleratorState: `timeout` (the Accelerator's own
        argument, or the handler's), `backend` and `init_method` when the handler changed them."""
        changed = self.init_handler.to_kwargs() if self.init_handler is not None else {}
        if timeout is not None and changed.get("timeout") is not None:
            raise ValueError(
                "timeout is given twice: as Accelerator(timeout=...) and in InitProcessGroupKwargs; pass one"
            )
        return {
            "timeout": timeout if timeout is not None else changed.get("timeout"),
            "backend": changed.get("backend"),
            "init_method": changed.get("init_method"),
        }

    def precision_kwargs(self) -> dict[str, Any]:
        """Return the `autocast_kwargs` and `scaler_kwargs` of the precision policy."""
        return {
            "autocast_kwargs": self.autocast_handler.to_kwargs() if self.autocast_handler else {},
            "scaler_kwargs": self.scaler_handler.to_kwargs() if self.scaler_handler else {},
        }

    def backend_options(self, precision: Precision, ddp_kwargs: dict[str, Any] | None) -> BackendOptions:
        """Return the backend's options: `precision`, and the DDP arguments and comm hook as the
        native backend's own option (`DdpOptions`, which other backends ignore)."""
        if self.ddp_handler is None:
            ddp = DdpOptions(kwargs=dict(ddp_kwargs or {}))
        elif ddp_kwargs:
            raise ValueError(
                "DDP arguments are given twice: as Accelerator(ddp_kwargs=...) and as "
                "DistributedDataParallelKwargs in kwargs_handlers; pass one"
            )
        else:
            handler = self.ddp_handler
            ddp = DdpOptions(kwargs=handler.to_kwargs(), comm_hook=handler.comm_hook_options())
        return BackendOptions(precision=precision, engine_options=(ddp,))
