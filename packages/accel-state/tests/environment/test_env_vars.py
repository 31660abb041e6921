"""Reading the documented environment variables: booleans, integers, numbers and strings."""

from __future__ import annotations

import pytest

from accel_state import EnvVarError, detect_launch_environment
from accel_state.environment import env_vars

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


# Refused values name the variable; unknown ACCEL_* names are warned of ------------------------


@pytest.mark.parametrize("raw", ["0", "-3"])
def test_read_int_below_the_minimum_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(EnvVarError) as raised:
        env_vars.read_int(NAME, 1, minimum=1)
    assert str(raised.value) == f"environment variable {NAME}={raw!r} must be at least 1"
    monkeypatch.setenv(NAME, "2")
    assert env_vars.read_int(NAME, 1, minimum=1) == 2


def test_unknown_accel_names_are_listed_with_the_closest_known_one():
    environ = {"ACCEL_MIXED_PRECISON": "bf16", "ACCEL_MIXED_PRECISION": "bf16", "ACCELERATE_X": "1",
               "ACCEL_ZZZZZZZZZZZZ": "1", "PATH": "/bin"}  # fmt: skip
    assert env_vars.unknown_variable_messages(environ) == [
        "environment variable ACCEL_MIXED_PRECISON is not one accel reads; it is ignored "
        "(did you mean ACCEL_MIXED_PRECISION?)",
        "environment variable ACCEL_ZZZZZZZZZZZZ is not one accel reads; it is ignored",
    ]


def test_every_accel_name_the_packages_use_is_known():
    """The adapters' ACCEL_* names live in env_vars too, so none is warned of as unknown."""
    import re
    from pathlib import Path

    packages = Path(__file__).resolve().parents[3]
    used = set()
    for source in packages.glob("*/src/**/*.py"):
        used |= set(re.findall(r"[\"'](ACCEL_[A-Z0-9_]+)[\"']", source.read_text(encoding="utf-8")))
    assert used, "no ACCEL_* string found in the packages' sources"
    assert sorted(used - env_vars.KNOWN_ACCEL_VARIABLES) == []
    for name in ("ACCEL_DEEPSPEED_ZERO_STAGE", "ACCEL_FSDP_VERSION", "ACCEL_TIMEOUT", "ACCEL_HOME"):
        assert name in env_vars.KNOWN_ACCEL_VARIABLES


_BUILD_STATE = """
import warnings
warnings.simplefilter("default")
from accel_state import PartialState
PartialState(cpu=True)
PartialState._reset_state()
PartialState(cpu=True)
print("built")
"""


def _build_state(env_overrides):
    import os
    import subprocess
    import sys

    env = {
        k: v for k, v in os.environ.items() if not k.startswith("ACCEL_") and k not in ("RANK", "WORLD_SIZE")
    }
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-c", _BUILD_STATE], env=env, capture_output=True, text=True, timeout=120
    )


def test_building_the_state_warns_once_of_an_unknown_accel_variable():
    done = _build_state({"ACCEL_MIXED_PRECISON": "bf16"})
    assert done.returncode == 0 and "built" in done.stdout, done.stderr
    warned = [line for line in done.stderr.splitlines() if "UnknownEnvVarWarning" in line]
    assert len(warned) == 1, done.stderr
    assert warned[0].endswith(
        "environment variable ACCEL_MIXED_PRECISON is not one accel reads; it is ignored "
        "(did you mean ACCEL_MIXED_PRECISION?)"
    )
    assert warned[0].startswith("<string>:"), warned[0]  # the script's line, not accel's


def test_an_accel_launch_job_does_not_warn_again():
    done = _build_state({"ACCEL_MIXED_PRECISON": "bf16", "ACCEL_LAUNCHED": "1"})
    assert done.returncode == 0 and "built" in done.stdout, done.stderr
    assert "UnknownEnvVarWarning" not in done.stderr  # accel launch warned before starting the ranks


def test_ranks_other_than_0_of_another_launcher_stay_quiet(monkeypatch):
    import warnings

    monkeypatch.setenv("ACCEL_MIXED_PRECISON", "bf16")
    monkeypatch.delenv("ACCEL_LAUNCHED", raising=False)
    for rank, expected in (("1", 0), ("0", 1)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setattr(env_vars, "_warned_unknown", False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env_vars.warn_unknown_variables()
            env_vars.warn_unknown_variables()  # once per process
        assert [w.category for w in caught] == [env_vars.UnknownEnvVarWarning] * expected, rank


@pytest.mark.parametrize("name", ["ACCEL_USE_CPU", "ACCEL_CHECK_COLLECTIVES", "ACCEL_DEBUG_MODE"])
def test_a_bad_flag_value_is_named_even_where_an_argument_decides(name):
    # PartialState(cpu=True) used to skip reading ACCEL_USE_CPU, and debug mode ACCEL_CHECK_COLLECTIVES.
    env = {name: "maybe"}
    if name == "ACCEL_CHECK_COLLECTIVES":
        env["ACCEL_DEBUG_MODE"] = "1"
    done = _build_state(env)
    assert done.returncode != 0
    assert f"environment variable {name}='maybe' is not a boolean" in done.stderr.splitlines()[-1]
