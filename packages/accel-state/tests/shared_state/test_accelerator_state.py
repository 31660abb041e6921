"""`AcceleratorState`: process facts of `PartialState` plus the mixed-precision mode."""

from __future__ import annotations

import pytest
import torch

from accel_state import AcceleratorState, DistributedType, MixedPrecisionError, PartialState


def test_defaults_delegate_process_facts_to_partial_state():
    state = AcceleratorState()
    assert state.mixed_precision == "no"
    assert state.distributed_type is DistributedType.NO
    assert state.device == torch.device("cpu")
    assert state.num_processes == 1
    assert state.is_main_process
    assert state.partial_state.__dict__ is PartialState().__dict__
    assert "Mixed precision type: no" in repr(state)


@pytest.mark.parametrize("mode", ["no", "fp16", "bf16", "BF16"])
def test_mixed_precision_from_argument(mode):
    assert AcceleratorState(mixed_precision=mode).mixed_precision == mode.lower()


def test_mixed_precision_from_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    assert AcceleratorState().mixed_precision == "fp16"


def test_argument_wins_over_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    assert AcceleratorState(mixed_precision="bf16").mixed_precision == "bf16"


def test_invalid_argument_names_the_argument_and_value():
    with pytest.raises(MixedPrecisionError, match="mixed_precision argument: 'fp8'"):
        AcceleratorState(mixed_precision="fp8")


def test_invalid_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "half")
    with pytest.raises(MixedPrecisionError, match="environment variable ACCEL_MIXED_PRECISION: 'half'"):
        AcceleratorState()


def test_a_failed_construction_leaves_no_half_built_state():
    with pytest.raises(MixedPrecisionError):
        AcceleratorState(mixed_precision="fp8")
    assert AcceleratorState(mixed_precision="no").mixed_precision == "no"


def test_state_is_shared_and_cannot_switch_precision():
    first = AcceleratorState(mixed_precision="bf16")
    assert AcceleratorState().mixed_precision == "bf16"
    assert AcceleratorState(mixed_precision="bf16").__dict__ is first.__dict__
    with pytest.raises(MixedPrecisionError, match="cannot switch to 'fp16'"):
        AcceleratorState(mixed_precision="fp16")


def test_reset_state_optionally_resets_partial_state():
    AcceleratorState(mixed_precision="bf16")
    AcceleratorState._reset_state()
    assert PartialState().initialized
    assert AcceleratorState().mixed_precision == "no"
    AcceleratorState._reset_state(reset_partial_state=True)
    assert PartialState.current() is None


def test_unknown_attribute_raises_attribute_error():
    state = AcceleratorState()
    with pytest.raises(AttributeError):
        _ = state.no_such_fact


def test_a_state_used_after_reset_says_it_was_reset():
    from accel_state import StateResetError

    state = AcceleratorState()
    AcceleratorState._reset_state()
    with pytest.raises(StateResetError, match=r"state was reset \(AcceleratorState._reset_state\(\)\)"):
        _ = state.device
    with pytest.raises(StateResetError, match="`mixed_precision`"):
        _ = state.mixed_precision


def test_after_a_reset_the_error_has_accelerates_words():
    # Accelerate's test_reinstantiated_state and test_accelerator_state_after_reset look for them.
    from accel_state import PartialState

    state = AcceleratorState()
    with pytest.raises(
        AttributeError, match="'AcceleratorState' object has no attribute 'someotherthing'"
    ) as cm:
        _ = state.someotherthing
    assert "This happens if" not in str(cm.value)
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError) as cm:
        _ = state.distributed_type
    message = str(cm.value)
    assert "`AcceleratorState` object has no attribute `distributed_type`" in message
    assert (
        "This happens if `AcceleratorState._reset_state()` was called and an `Accelerator` or "
        "`PartialState` was not reinitialized" in message
    )
    partial = PartialState()
    PartialState._reset_state()
    with pytest.raises(AttributeError) as cm:
        _ = partial.num_processes
    assert "`PartialState` object has no attribute `num_processes`" in str(cm.value)
    assert "This happens if `PartialState._reset_state()`" in str(cm.value)
    with pytest.raises(AttributeError, match="'PartialState' object has no attribute 'someotherthing'"):
        _ = partial.someotherthing
    state.someotherthing = "MyValue"
    assert state.someotherthing == "MyValue"


def test_partial_state_is_the_process_facts_it_extends_and_reset_says_so():
    from accel_state import StateResetError

    state = AcceleratorState()
    assert state.partial_state.__dict__ is PartialState().__dict__
    assert state.partial_state.device == state.device
    AcceleratorState._reset_state()
    with pytest.raises(StateResetError, match="`partial_state`"):
        _ = state.partial_state
