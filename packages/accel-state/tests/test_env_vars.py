"""Reading the documented environment variables: booleans, integers, numbers and strings."""

from __future__ import annotations

import pytest

from accel_state import EnvVarError, detect_launch_environment, env_vars

NAME = "ACCEL_TEST_VARIABLE"


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "On", " 1 "])
def test_read_flag_true_words(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert env_vars.read_flag(NAME) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_read_flag_false_words(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert env_vars.read_flag(NAME, default=True) is False


def test_read_flag_unset_gives_default():
    assert env_vars.read_flag(NAME) is False
    assert env_vars.read_flag(NAME, default=True) is True


@pytest.mark.parametrize("raw", ["2", "maybe", "tru"])
def test_read_flag_rejects_other_values_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(EnvVarError, match=NAME) as raised:
        env_vars.read_flag(NAME)
    assert repr(raw) in str(raised.value)


def test_read_int(monkeypatch):
    assert env_vars.read_int(NAME) is None
    assert env_vars.read_int(NAME, 7) == 7
    monkeypatch.setenv(NAME, "  ")
    assert env_vars.read_int(NAME, 7) == 7
    monkeypatch.setenv(NAME, "-12")
    assert env_vars.read_int(NAME) == -12


@pytest.mark.parametrize("raw", ["1.5", "four", "0x10"])
def test_read_int_rejects_non_integers_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(EnvVarError, match=f"{NAME}={raw!r} is not an integer"):
        env_vars.read_int(NAME)


def test_read_float(monkeypatch):
    assert env_vars.read_float(NAME, 2.5) == 2.5
    monkeypatch.setenv(NAME, "0.25")
    assert env_vars.read_float(NAME) == 0.25
    monkeypatch.setenv(NAME, "soon")
    with pytest.raises(EnvVarError, match=NAME):
        env_vars.read_float(NAME)


def test_read_str_strips_and_treats_empty_as_unset(monkeypatch):
    assert env_vars.read_str(NAME, "d") == "d"
    monkeypatch.setenv(NAME, "")
    assert env_vars.read_str(NAME, "d") == "d"
    monkeypatch.setenv(NAME, " bf16 ")
    assert env_vars.read_str(NAME) == "bf16"


def test_env_var_error_is_a_value_error():
    assert issubclass(EnvVarError, ValueError)


def test_bad_launcher_integer_names_the_variable(monkeypatch):
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(EnvVarError, match="RANK='zero'"):
        detect_launch_environment()
