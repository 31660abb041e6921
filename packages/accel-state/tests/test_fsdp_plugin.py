"""FullyShardedDataParallelPlugin: defaults from the launcher's ACCEL_FSDP_* vars, values checked in
one error naming the field, FSDP1 refused; the auto-wrap policy's choice of submodules."""

from __future__ import annotations

import functools

import pytest
import torch

from accel_state import FsdpConfigError, FullyShardedDataParallelPlugin
from accel_state.backend import _BUILT_IN
from accel_state.distributed_type import DistributedType
from accel_state.fsdp_wrap import modules_to_shard

FSDP_VARS = (
    "ACCEL_FSDP_VERSION",
    "ACCEL_FSDP_AUTO_WRAP_POLICY",
    "ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP",
    "ACCEL_FSDP_MIN_NUM_PARAMS",
    "ACCEL_FSDP_RESHARD_AFTER_FORWARD",
    "ACCEL_FSDP_STATE_DICT_TYPE",
    "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING",
    "ACCEL_FSDP_ACTIVATION_CHECKPOINTING",
    "ACCEL_FSDP_OFFLOAD_PARAMS",
)


@pytest.fixture(autouse=True)
def _no_launcher_vars(monkeypatch):
    for name in FSDP_VARS:
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_fsdp2_sharded_checkpoints_and_no_wrap():
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.auto_wrap_policy == "NO_WRAP"
    assert plugin.reshard_after_forward is True
    assert plugin.state_dict_type == "SHARDED_STATE_DICT"
    assert plugin.distributed_type is DistributedType.FSDP
    assert _BUILT_IN[DistributedType.FSDP] == "accel_state.fsdp_backend:FsdpBackend"


def test_unset_fields_come_from_the_launchers_variables(monkeypatch):
    monkeypatch.setenv("ACCEL_FSDP_AUTO_WRAP_POLICY", "transformer_based_wrap")
    monkeypatch.setenv("ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP", "Block, Head")
    monkeypatch.setenv("ACCEL_FSDP_RESHARD_AFTER_FORWARD", "false")
    monkeypatch.setenv("ACCEL_FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    monkeypatch.setenv("ACCEL_FSDP_ACTIVATION_CHECKPOINTING", "true")
    monkeypatch.setenv("ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING", "1")
    plugin = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT")
    assert plugin.auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
    assert plugin.transformer_cls_names_to_wrap == ["Block", "Head"]
    assert plugin.reshard_after_forward is False
    assert plugin.state_dict_type == "SHARDED_STATE_DICT", "the script's value wins over the launcher's"
    assert plugin.activation_checkpointing is True and plugin.cpu_ram_efficient_loading is True


def test_a_mixed_precision_policy_of_fsdp_is_kept():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    assert FullyShardedDataParallelPlugin(mixed_precision_policy=policy).mixed_precision_policy is policy


def test_size_based_wrap_defaults_to_accelerates_threshold():
    assert FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP").min_num_params == 100_000_000


def test_fsdp_version_1_is_refused_saying_so(monkeypatch):
    with pytest.raises(
        FsdpConfigError, match=r"FSDP1 \(the FullyShardedDataParallel wrapper\) is not supported"
    ):
        FullyShardedDataParallelPlugin(fsdp_version=1)
    monkeypatch.setenv("ACCEL_FSDP_VERSION", "1")
    with pytest.raises(FsdpConfigError, match=r"--fsdp_version \(ACCEL_FSDP_VERSION=1\): FSDP1"):
        FullyShardedDataParallelPlugin()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fsdp_version": 3}, "FullyShardedDataParallelPlugin(fsdp_version=...): 3 is not an FSDP version"),
        ({"auto_wrap_policy": "EVERYTHING"}, "'EVERYTHING' is not an auto-wrap policy"),
        ({"auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}, "needs transformer_cls_names_to_wrap"),
        ({"state_dict_type": "LOCAL_STATE_DICT"}, "'LOCAL_STATE_DICT' is not a state dict type FSDP2 saves"),
        ({"reshard_after_forward": "sometimes"}, "reshard_after_forward=...): 'sometimes' is not a boolean"),
        ({"min_num_params": "many"}, "min_num_params=...): 'many' is not an integer"),
        ({"mixed_precision_policy": "bf16"}, "'bf16' is not a torch.distributed.fsdp.MixedPrecisionPolicy"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_field_and_value(kwargs, message):
    with pytest.raises(FsdpConfigError) as caught:
        FullyShardedDataParallelPlugin(**kwargs)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bad_launcher_value_names_the_flag_and_variable(monkeypatch):
    monkeypatch.setenv("ACCEL_FSDP_STATE_DICT_TYPE", "LOCAL_STATE_DICT")
    with pytest.raises(
        FsdpConfigError, match=r"--fsdp_state_dict_type \(ACCEL_FSDP_STATE_DICT_TYPE=LOCAL_STATE_DICT\)"
    ):
        FullyShardedDataParallelPlugin()


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(8, 1)


def _names(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[str]:
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(m)] for m in modules_to_shard(model, plugin)]


def test_the_auto_wrap_policy_names_submodules_children_first():
    model = Net()
    blocks = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap="Block")
    assert _names(model, blocks) == ["blocks.1", "blocks.0"]
    by_size = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=50)
    assert _names(model, by_size) == ["blocks.1.linear", "blocks.1", "blocks.0.linear", "blocks.0"]
    head = FullyShardedDataParallelPlugin(auto_wrap_policy=lambda m: m is model.head)
    assert _names(model, head) == ["head"]
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    fsdp1 = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    assert _names(model, FullyShardedDataParallelPlugin(auto_wrap_policy=fsdp1)) == ["blocks.1", "blocks.0"]
    assert _names(model, FullyShardedDataParallelPlugin()) == []


def test_a_class_name_the_model_lacks_is_refused():
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block", "Missing"])
    with pytest.raises(FsdpConfigError, match="Missing is not the class of any submodule of Net"):
        modules_to_shard(Net(), plugin)
