"""`GeneralTracker`: what every experiment tracker implements, and the errors of choosing trackers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from accel_state import PartialState

F = TypeVar("F", bound=Callable[..., Any])


class TrackerError(ValueError):
    """A tracker was asked for that cannot be used: unknown name, or no logging directory."""


class TrackerNotInstalledError(TrackerError, ImportError):
    """A tracker was asked for whose package is not installed."""


def on_main_process(method: F) -> F:
    """Decorate a tracker method so that it runs only on the main process when the tracker's
    `main_process_only` is True (on the others it returns None)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", True) and not PartialState().is_main_process:
            return None
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class GeneralTracker:
    """Base of every experiment tracker.

    A subclass sets the class attributes `name` (what `log_with` and `get_tracker` call it) and
    `requires_logging_directory`, and the property `tracker` (the tracking library's own object, e.g.
    a W&B run). `main_process_only` (default True) makes it exist on the main process only.
    `start`, `store_init_configuration`, `log` and `finish` take what the tracking library needs.
    """

    name: str
    requires_logging_directory: bool
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [attr for attr in ("name", "requires_logging_directory") if not hasattr(self, attr)]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} does not define {', '.join(missing)}: a tracker class sets `name`, "
                "`requires_logging_directory` and the `tracker` property"
            )

    @property
    def tracker(self) -> Any:
        """Return the tracking library's own object (subclasses override it; None here, for a
        tracker that does nothing)."""
        return None

    def start(self) -> None:
        """Start the run when `init_trackers` is called (for trackers built before the process group)."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record `values` as the run's hyperparameters."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record `values` (names to numbers or strings) at `step`."""

    def finish(self) -> None:
        """Close the run and flush what is buffered."""
