"""ACCEL_GRADIENT_ACCUMULATION_STEPS (set by `accel launch --gradient_accumulation_steps`): a value
the Accelerator refuses names the variable, as the launcher's own check does."""

from __future__ import annotations

import pytest

from accel import Accelerator
from accel_state import EnvVarError


@pytest.mark.parametrize(
    ("raw", "problem"),
    [("0", "must be at least 1"), ("-2", "must be at least 1"), ("x", "is not an integer")],
)
def test_a_refused_accumulation_variable_is_named(monkeypatch, raw, problem):
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", raw)
    with pytest.raises(EnvVarError) as raised:
        Accelerator(cpu=True)
    assert str(raised.value) == f"environment variable ACCEL_GRADIENT_ACCUMULATION_STEPS={raw!r} {problem}"


def test_a_valid_variable_sets_the_steps(monkeypatch):
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "3")
    assert Accelerator(cpu=True).gradient_accumulation_steps == 3
