"""`get_logger` on one process: the main process logs, levels come from the argument or ACCEL_LOG_LEVEL."""

from __future__ import annotations

import logging

import pytest

from accel_state import EnvVarError, PartialState
from accel_state.shared_state.process_logging import LoggerStateError, MultiProcessAdapter, get_logger


def test_logging_before_the_state_exists_is_an_error_naming_the_fix():
    logger = get_logger("accel.test.nostate")
    with pytest.raises(LoggerStateError, match="PartialState"):
        logger.info("hello")


def test_the_main_process_logs_with_the_callers_location(caplog):
    PartialState()
    logger = get_logger("accel.test.main", log_level="INFO")
    assert isinstance(logger, MultiProcessAdapter)
    with caplog.at_level(logging.INFO, logger="accel.test.main"):
        logger.info("once %s", "only")
        logger.info("everywhere", main_process_only=False)
        logger.log(logging.INFO, "in order", main_process_only=False, in_order=True)
        logger.debug("hidden")
    assert [r.getMessage() for r in caplog.records] == ["once only", "everywhere", "in order"]
    assert {r.filename for r in caplog.records} == {"test_process_logging.py"}


def test_warning_once_warns_once(caplog):
    PartialState()
    logger = get_logger("accel.test.once")
    with caplog.at_level(logging.WARNING, logger="accel.test.once"):
        logger.warning_once("careful")
        logger.warning_once("careful")
    assert [r.getMessage() for r in caplog.records] == ["careful"]


def test_the_level_comes_from_the_argument_else_the_environment(monkeypatch):
    root_level = logging.getLogger().level
    try:
        assert get_logger("accel.test.arg", log_level="debug").logger.level == logging.DEBUG
        monkeypatch.setenv("ACCEL_LOG_LEVEL", "error")
        assert get_logger("accel.test.env").logger.level == logging.ERROR
        assert get_logger("accel.test.both", log_level="INFO").logger.level == logging.INFO
        monkeypatch.setenv("ACCEL_LOG_LEVEL", "LOUD")
        with pytest.raises(EnvVarError, match="ACCEL_LOG_LEVEL='LOUD'"):
            get_logger("accel.test.bad")
        with pytest.raises(ValueError, match="log_level='LOUD'"):
            get_logger("accel.test.bad", log_level="LOUD")
    finally:
        logging.getLogger().setLevel(root_level)
