"""`DistributedType` uses Accelerate's names and string values."""

from __future__ import annotations

from accel_state import DistributedType


def test_values_are_accelerates_strings():
    assert {t.name: t.value for t in DistributedType} == {
        "NO": "NO",
        "MULTI_CPU": "MULTI_CPU",
        "MULTI_GPU": "MULTI_GPU",
        "DEEPSPEED": "DEEPSPEED",
        "XLA": "XLA",
        "FSDP": "FSDP",
    }


def test_members_compare_and_print_as_strings():
    assert DistributedType.MULTI_GPU == "MULTI_GPU"
    assert str(DistributedType.NO) == "NO"
    assert f"{DistributedType.XLA}" == "XLA"
    assert DistributedType("MULTI_CPU") is DistributedType.MULTI_CPU
