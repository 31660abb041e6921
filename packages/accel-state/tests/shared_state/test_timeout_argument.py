"""A bad `timeout` argument or ACCEL_TIMEOUT is a ValueError naming it, not a crash inside torch."""

from __future__ import annotations

import datetime

import pytest

from accel_state import EnvVarError, PartialState
from accel_state.shared_state.partial_state import DEFAULT_TIMEOUT, resolve_timeout


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (-5, "timeout must be a finite number of seconds above 0, got -5"),
        (0, "timeout must be a finite number of seconds above 0, got 0"),
        (float("nan"), "timeout must be a finite number of seconds above 0, got nan"),
        (float("inf"), "timeout must be a finite number of seconds above 0, got inf"),
        ("abc", "timeout must be a number of seconds or a datetime.timedelta, got 'abc' (str)"),
        (True, "timeout must be a number of seconds or a datetime.timedelta, got True (bool)"),
        (datetime.timedelta(0), "timeout must be above 0, got datetime.timedelta(0)"),
    ],
)
def test_bad_timeout_argument_is_a_value_error_naming_it(timeout, message):
    with pytest.raises(ValueError) as info:
        resolve_timeout(timeout)
    assert str(info.value) == message
    with pytest.raises(ValueError, match="^timeout must be"):
        PartialState(timeout=timeout)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", "is not a number"),
        ("-5", "must be a finite number of seconds above 0"),
        ("nan", "must be a finite number of seconds above 0"),
        ("0", "must be a finite number of seconds above 0"),
    ],
)
def test_bad_accel_timeout_is_an_error_naming_the_variable(monkeypatch, value, problem):
    monkeypatch.setenv("ACCEL_TIMEOUT", value)
    with pytest.raises(EnvVarError) as info:
        resolve_timeout(None)
    assert str(info.value) == f"environment variable ACCEL_TIMEOUT={value!r} {problem}"
    with pytest.raises(EnvVarError, match="ACCEL_TIMEOUT"):
        PartialState()


def test_good_timeouts_pass(monkeypatch):
    assert resolve_timeout(2.5) == datetime.timedelta(seconds=2.5)
    assert resolve_timeout(datetime.timedelta(minutes=1)) == datetime.timedelta(minutes=1)
    assert resolve_timeout(None) == DEFAULT_TIMEOUT
    monkeypatch.setenv("ACCEL_TIMEOUT", " 12.5 ")
    assert resolve_timeout(None) == datetime.timedelta(seconds=12.5)
