"""ACCEL_LOG_LEVEL is checked before launch, like every other ACCEL_* variable."""

from __future__ import annotations

import pytest

from accel_launch.config.schema import ConfigError
from accel_launch.launch import env_check


@pytest.mark.parametrize("value", ["INFO", "debug", " Warning ", "ERROR", "critical"])
def test_a_logging_level_name_passes(value):
    env_check.check_accel_env({"ACCEL_LOG_LEVEL": value})


def test_another_word_is_refused_naming_the_variable_and_the_choices():
    with pytest.raises(ConfigError, match=r"ACCEL_LOG_LEVEL='LOUD' must be one of DEBUG, INFO, WARNING"):
        env_check.check_accel_env({"ACCEL_LOG_LEVEL": "LOUD"})
