"""Loggers that know the job's processes: log once (on the main process) or on every rank in turn."""

from __future__ import annotations

import functools
import logging
from collections.abc import MutableMapping
from typing import Any

from accel_state.environment import env_vars
from accel_state.shared_state.partial_state import PartialState


class LoggerStateError(RuntimeError):
    """A multi-process logger was used before the process's state was set up."""


def _state() -> PartialState:
    state = PartialState.current()
    if state is None:
        raise LoggerStateError(
            "create the state with `PartialState()` or `Accelerator()` before logging through a logger "
            "from `get_logger`: it needs to know which process is the main one"
        )
    return state


class MultiProcessAdapter(logging.LoggerAdapter):
    """A logger adapter whose records are emitted on the main process only, unless asked otherwise.

    `log(level, msg, *args, main_process_only=True, in_order=False, **kwargs)`, and `debug`,
    `info`, `warning`, ... alike: with `main_process_only=False` every process emits the record;
    adding `in_order=True` makes them do it one after another by rank, every process waiting
    for the others between turns (so each must make the same call).
    """

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """Return `msg` and `kwargs` unchanged: records carry no extra prefix."""
        return msg, kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Emit on the main process only unless `main_process_only=False`."""
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        # Point the record's file and line at the caller (logging skips its own LoggerAdapter frames;
        # one more level for _emit).
        kwargs["stacklevel"] = kwargs.get("stacklevel", 2) + 1
        state = _state()
        if not self.isEnabledFor(level):
            return
        if main_process_only or not in_order:
            if not main_process_only or state.is_main_process:
                self._emit(level, msg, args, kwargs)
            return
        for rank in range(state.num_processes):
            if rank == state.process_index:
                self._emit(level, msg, args, kwargs)
            state.wait_for_everyone()

    def _emit(self, level: int, msg: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        processed, processed_kwargs = self.process(msg, kwargs)
        self.logger.log(level, processed, *args, **processed_kwargs)

    @functools.lru_cache(None)  # noqa: B019 - the cache is the point: one warning per message
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """Emit `warning(*args, **kwargs)` the first time it is called with these arguments only."""
        self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """Return a MultiProcessAdapter around `logging.getLogger(name)`.

    `log_level` (a level name such as "INFO"), else the ACCEL_LOG_LEVEL environment variable, sets
    the level of that logger and of the root logger; with neither, levels are left as they are.
    """
    source = "log_level"
    if log_level is None:
        log_level = env_vars.read_str(env_vars.LOG_LEVEL)
        source = f"environment variable {env_vars.LOG_LEVEL}"
    logger = logging.getLogger(name)
    if log_level is not None:
        level = log_level.strip().upper()
        if not isinstance(logging.getLevelName(level), int):
            error = env_vars.EnvVarError if source != "log_level" else ValueError
            raise error(
                f"{source}={log_level!r} is not a logging level (use DEBUG, INFO, WARNING, ERROR or CRITICAL)"
            )
        logger.setLevel(level)
        logger.root.setLevel(level)
    return MultiProcessAdapter(logger, {})
