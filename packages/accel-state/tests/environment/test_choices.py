"""The option values shared by the launcher and the library."""

from __future__ import annotations

from accel_state import DistributedType
from accel_state.environment import choices


def test_every_distributed_type_of_the_library_is_accepted_in_a_config_file():
    assert {kind.value for kind in DistributedType} <= set(choices.CONFIG_DISTRIBUTED_TYPES)


def test_launchable_types_are_library_types_and_cpu_types_launchable():
    assert set(choices.LAUNCHABLE_DISTRIBUTED_TYPES) <= {kind.value for kind in DistributedType}
    assert set(choices.CPU_DISTRIBUTED_TYPES) <= set(choices.LAUNCHABLE_DISTRIBUTED_TYPES)


def test_a_config_file_takes_every_mode_the_library_runs_and_more():
    assert choices.MIXED_PRECISION_CHOICES == ("no", "fp16", "bf16")
    assert set(choices.MIXED_PRECISION_CHOICES) < set(choices.CONFIG_MIXED_PRECISION_CHOICES)
    assert choices.DEFAULT_MASTER_PORT == 29500


def test_deepspeed_is_launchable_on_gpus_and_on_the_cpu():
    assert "DEEPSPEED" in choices.LAUNCHABLE_DISTRIBUTED_TYPES
    assert "DEEPSPEED" in choices.CPU_DISTRIBUTED_TYPES
    assert "MULTI_GPU" not in choices.CPU_DISTRIBUTED_TYPES


def test_deepspeed_choices_are_accelerates():
    assert choices.ZERO_STAGES == (0, 1, 2, 3)
    assert choices.DEEPSPEED_OFFLOAD_DEVICES == ("none", "cpu", "nvme")
