"""DDP communication hooks: the options accept Accelerate's names, and registering builds the
hook (PowerSGD's state, the compression wrapper) on the model."""

from __future__ import annotations

import pytest

from accel_state import CommHookOptions, DDPCommunicationHookType
from accel_state.backends.native.ddp_comm_hooks import register_comm_hook


def test_comm_hook_options_accept_strings_and_refuse_unknown_names():
    options = CommHookOptions("POWER_SGD", "bf16", {"matrix_approximation_rank": 2})
    assert options.hook is DDPCommunicationHookType.POWER_SGD and options.enabled
    assert options.wrapper is DDPCommunicationHookType.BF16
    assert not CommHookOptions().enabled
    with pytest.raises(ValueError, match="comm_hook 'int8'"):
        CommHookOptions("int8")
    with pytest.raises(ValueError, match="comm_wrapper 'batched_power_sgd' is not a wrapper"):
        CommHookOptions("fp16", "batched_power_sgd")


class _RecordingModel:
    def __init__(self):
        self.registered = []

    def register_comm_hook(self, state, hook):
        self.registered.append((state, hook))


def test_register_comm_hook_builds_powersgd_state_and_wraps_the_hook():
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    model = _RecordingModel()
    register_comm_hook(model, CommHookOptions())  # type: ignore[arg-type]
    assert model.registered == []
    register_comm_hook(model, CommHookOptions("fp16"))  # type: ignore[arg-type]
    register_comm_hook(
        model,  # type: ignore[arg-type]
        CommHookOptions("batched_power_sgd", "fp16", {"matrix_approximation_rank": 3}),
    )
    (state, hook), (sgd_state, wrapped) = model.registered
    assert state is None and hook.__name__ == "fp16_compress_hook"
    assert isinstance(sgd_state, PowerSGDState) and sgd_state.matrix_approximation_rank == 3
    assert sgd_state.process_group is None
    assert wrapped.__name__ == "fp16_compress_wrapper_hook"
