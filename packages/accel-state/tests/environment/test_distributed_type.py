"""`DistributedType` uses Accelerate's names and string values, and has every member Accelerate's has."""

from __future__ import annotations

import pytest

from accel_state import (
    BackendNotAvailableError,
    DistributedType,
    EnvVarError,
    resolve_distributed_type,
)
from accel_state.environment import choices
from accel_state.seam import backend as backend_module

ACCELERATE_MEMBERS = (
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",
    "MULTI_HPU", "MULTI_NEURON", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM",
)  # fmt: skip


def test_values_are_accelerates_strings():
    assert {t.name: t.value for t in DistributedType} == {name: name for name in ACCELERATE_MEMBERS}


def test_members_compare_and_print_as_strings():
    assert DistributedType.MULTI_GPU == "MULTI_GPU"
    assert str(DistributedType.NO) == "NO"
    assert f"{DistributedType.XLA}" == "XLA"
    assert DistributedType("MULTI_CPU") is DistributedType.MULTI_CPU


def test_a_scripts_gating_tuple_evaluates():
    gating = (DistributedType.MULTI_GPU, DistributedType.MULTI_NPU, DistributedType.MULTI_MLU,
              DistributedType.MULTI_SDAA, DistributedType.MULTI_MUSA, DistributedType.MULTI_XPU,
              DistributedType.MULTI_HPU)  # fmt: skip
    assert DistributedType.MULTI_CPU not in gating
    assert "MULTI_XPU" in gating


def test_config_choices_are_the_enum_and_launch_choices_those_with_a_backend():
    assert choices.CONFIG_DISTRIBUTED_TYPES == tuple(t.value for t in DistributedType)
    assert choices.LAUNCHABLE_DISTRIBUTED_TYPES == ("NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP")


@pytest.mark.parametrize("value", ["multi_npu", " MEGATRON_LM ", "MULTI_NEURON"])
def test_the_env_var_parses_every_member(monkeypatch, value):
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", value)
    assert resolve_distributed_type() is DistributedType(value.strip().upper())


def test_an_unknown_env_value_is_an_env_var_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "TPU_POD")
    with pytest.raises(EnvVarError, match="ACCEL_DISTRIBUTED_TYPE.*MEGATRON_LM"):
        resolve_distributed_type()


@pytest.mark.parametrize("kind", ["MULTI_NPU", "MULTI_HPU", "MEGATRON_LM", "MULTI_NEURON"])
def test_a_member_without_installed_backend_is_backend_not_available(kind):
    backend_module._registry.pop(DistributedType(kind), None)
    with pytest.raises(BackendNotAvailableError, match=kind):
        backend_module.backend_factory(kind)
