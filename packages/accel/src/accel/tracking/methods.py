"""The experiment-tracking methods of the Accelerator: `init_trackers`, `log`, `get_tracker`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.options.project_config import ProjectConfiguration
    from accel.tracking.base import GeneralTracker
    from accel_state import AcceleratorState


class ExperimentTracking:
    """Mixin of the Accelerator; `self.project_configuration` and `self.state` come from it."""

    project_configuration: ProjectConfiguration
    state: AcceleratorState
    log_with: list[str | GeneralTracker]
    _trackers: list[GeneralTracker]

    def _set_up_tracking(self, log_with: Any) -> None:
        # Checked when the Accelerator is built, on every rank: a missing package fails everywhere at once.
        # The trackers' code loads only for a run that asks for one.
        if log_with is None:
            self.log_with = []
        else:
            from accel.tracking.registry import resolve_trackers

            self.log_with = resolve_trackers(log_with, self.logging_dir)
        self._trackers = []

    @property
    def logging_dir(self) -> str | os.PathLike[str] | None:
        """The folder trackers write to (`ProjectConfiguration.logging_dir`), or None."""
        return self.project_configuration.logging_dir

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The trackers this process logs to (none on other processes for main-process-only ones)."""
        return self._trackers

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Start the trackers of `log_with` for run `project_name`, storing `config` as its
        hyperparameters. `init_kwargs` maps a tracker name to its constructor's keyword arguments
        (e.g. `{"wandb": {"entity": "me"}}`)."""
        from accel.tracking.registry import build_trackers

        started = build_trackers(
            self.log_with, project_name, self.logging_dir, init_kwargs or {}, self.state.is_main_process
        )
        self._trackers.extend(started)
        if config is not None:
            for tracker in started:
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """Return the tracker called `name` (its library's own object with `unwrap=True`).

        On a process where that tracker does not run (main-process-only trackers), return a
        tracker whose methods do nothing, so the same script runs on every rank.
        """
        for tracker in self._trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        requested = {item if isinstance(item, str) else item.name for item in self.log_with}
        if name in requested and not self.state.is_main_process:
            from accel.tracking.base import GeneralTracker

            return GeneralTracker(_blank=True)
        raise ValueError(
            f"get_tracker: {name!r} is not a tracker of this Accelerator; it has "
            f"{sorted(t.name for t in self._trackers) or 'none'} (log_with=... and init_trackers start them)"
        )

    def log(
        self,
        values: dict[str, Any],
        step: int | None = None,
        log_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Log `values` at `step` to every tracker; `log_kwargs` maps a tracker name to extra
        keyword arguments of its `log`."""
        log_kwargs = log_kwargs or {}
        for tracker in self._trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def _finish_trackers(self) -> None:
        for tracker in self._trackers:
            tracker.finish()
