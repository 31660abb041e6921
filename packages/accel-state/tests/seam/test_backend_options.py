"""`BackendOptions`: one plugin, and each backend's own options by their type, which the seam
passes on without knowing them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from accel_state import BackendOptions, CommHookOptions, DdpOptions, NativeBackend, PartialState


@dataclass(frozen=True)
class _EngineKnobs:
    level: int = 0


def test_a_backend_reads_the_options_of_its_own_type_and_none_of_others():
    knobs = _EngineKnobs(3)
    options = BackendOptions(engine_options=[DdpOptions(kwargs={"static_graph": True}), knobs])
    assert options.engine_option(_EngineKnobs) is knobs
    assert options.engine_option(DdpOptions) == DdpOptions(kwargs={"static_graph": True})
    assert BackendOptions().engine_option(_EngineKnobs) is None
    assert isinstance(options.engine_options, tuple)


def test_two_options_of_one_type_are_refused_by_name():
    with pytest.raises(ValueError, match="one object per type, got _EngineKnobs twice"):
        BackendOptions(engine_options=(_EngineKnobs(1), _EngineKnobs(2)))


def test_the_native_backend_takes_its_ddp_options_and_ignores_the_rest():
    hook = CommHookOptions("fp16")
    options = BackendOptions(engine_options=(_EngineKnobs(), DdpOptions({"bucket_cap_mb": 10}, hook)))
    backend = NativeBackend(PartialState(), options)
    assert backend.ddp_kwargs == {"bucket_cap_mb": 10} and backend.comm_hook is hook
    plain = NativeBackend(PartialState(), BackendOptions())
    assert plain.ddp_kwargs == {} and not plain.comm_hook.enabled
    assert plain.plugin is None
