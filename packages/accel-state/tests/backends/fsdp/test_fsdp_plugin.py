"""FullyShardedDataParallelPlugin: defaults from the launcher's ACCEL_FSDP_* vars, values checked in
one error naming the field, FSDP1 refused; the auto-wrap policy's choice of submodules."""

from __future__ import annotations

import functools

import pytest
import torch

from accel_state import FsdpConfigError, FullyShardedDataParallelPlugin
from accel_state.backends.fsdp.backend import FsdpBackend
from accel_state.backends.fsdp.wrap import modules_to_shard
from accel_state.environment.distributed_type import DistributedType
from accel_state.seam import backend as backend_module

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
    "ACCEL_FSDP_SHARDING_STRATEGY",
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
    assert backend_module._installed()["FSDP"].load() is FsdpBackend  # accel-state's own entry point


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


def test_the_launchers_sharding_strategy_is_run_unless_the_script_gives_one(monkeypatch):
    monkeypatch.setenv("ACCEL_FSDP_SHARDING_STRATEGY", "2")  # an older Accelerate file's SHARD_GRAD_OP
    plugin = FullyShardedDataParallelPlugin()
    assert (plugin.sharding_strategy, plugin.reshard_after_forward) == ("SHARD_GRAD_OP", False)
    assert plugin.sources["sharding_strategy"].startswith("--fsdp_sharding_strategy")
    scripted = FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD")
    assert (scripted.sharding_strategy, scripted.reshard_after_forward) == ("FULL_SHARD", True)
    monkeypatch.setenv("ACCEL_FSDP_SHARDING_STRATEGY", "QUARTER_SHARD")
    with pytest.raises(
        FsdpConfigError, match=r"--fsdp_sharding_strategy \(ACCEL_FSDP_SHARDING_STRATEGY=QUARTER_SHARD\)"
    ):
        FullyShardedDataParallelPlugin()


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
        (
            {"mixed_precision_policy": "bf16"},
            "'bf16' is neither a torch.distributed.fsdp.MixedPrecisionPolicy, FSDP1's MixedPrecision",
        ),
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


# Accelerate's FSDP1-era arguments ---------------------------------------------------------------
def test_accelerates_peak_memory_example_plugin_is_a_full_state_dict_gathered_everywhere():
    from torch.distributed.fsdp.fully_sharded_data_parallel import (
        FullOptimStateDictConfig,
        FullStateDictConfig,
    )

    plugin = FullyShardedDataParallelPlugin(
        state_dict_config=FullStateDictConfig(offload_to_cpu=False, rank0_only=False),
        optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=False),
    )
    assert plugin.state_dict_type == "FULL_STATE_DICT"
    assert (plugin.state_dict_offload_to_cpu, plugin.state_dict_rank0_only) == (False, False)
    assert (plugin.optim_state_dict_offload_to_cpu, plugin.optim_state_dict_rank0_only) == (False, False)
    default = FullyShardedDataParallelPlugin(state_dict_type="FULL_STATE_DICT")
    assert (default.state_dict_offload_to_cpu, default.state_dict_rank0_only) == (True, True)


def test_a_sharded_config_picks_sharded_checkpoints_and_beats_the_launchers_type(monkeypatch):
    from torch.distributed.fsdp import FullStateDictConfig, ShardedStateDictConfig

    monkeypatch.setenv("ACCEL_FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    plugin = FullyShardedDataParallelPlugin(state_dict_config=ShardedStateDictConfig(offload_to_cpu=True))
    assert plugin.state_dict_type == "SHARDED_STATE_DICT"
    with pytest.raises(FsdpConfigError, match="state_dict_type=SHARDED_STATE_DICT but state_dict_config is "):
        FullyShardedDataParallelPlugin(
            state_dict_type="SHARDED_STATE_DICT", state_dict_config=FullStateDictConfig()
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"state_dict_config": "full"},
            "state_dict_config=...): str is not one of torch's FullStateDictConfig",
        ),
        (
            {"sharding_strategy": "HALF_SHARD"},
            "'HALF_SHARD' is not a sharding strategy; choose one of FULL_SHARD",
        ),
        ({"sharding_strategy": 9}, "9 is not a sharding strategy"),
        ({"backward_prefetch": "SOMETIMES"}, "'SOMETIMES' is not a backward prefetch"),
        ({"use_orig_params": "maybe"}, "use_orig_params=...): 'maybe' is not a boolean"),
        ({"ignored_modules": [3]}, "ignored_modules=...): [3] holds something that is not a torch module"),
        ({"mixed_precision_policy": {"param_dtype": "int3"}}, "names a dtype 'int3'"),
        (
            {"sharding_strategy": "FULL_SHARD", "reshard_after_forward": False},
            "sharding_strategy=FULL_SHARD means reshard_after_forward=True, but reshard_after_forward=False",
        ),
    ],
)
def test_a_bad_fsdp1_argument_is_one_line_naming_it(kwargs, message):
    with pytest.raises(FsdpConfigError) as caught:
        FullyShardedDataParallelPlugin(**kwargs)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_local_state_dicts_and_mixed_full_and_sharded_configs_are_refused():
    from torch.distributed.fsdp import (
        FullOptimStateDictConfig,
        LocalStateDictConfig,
        ShardedStateDictConfig,
    )

    with pytest.raises(FsdpConfigError, match="LocalStateDictConfig is FSDP1's LOCAL_STATE_DICT"):
        FullyShardedDataParallelPlugin(state_dict_config=LocalStateDictConfig())
    with pytest.raises(FsdpConfigError, match="both must be Full or both Sharded"):
        FullyShardedDataParallelPlugin(
            state_dict_config=ShardedStateDictConfig(), optim_state_dict_config=FullOptimStateDictConfig()
        )


def test_sharding_strategies_become_reshard_after_forward_and_a_mesh_kind():
    from torch.distributed.fsdp import ShardingStrategy

    cases = {
        "FULL_SHARD": ("FULL_SHARD", True),
        ShardingStrategy.SHARD_GRAD_OP: ("SHARD_GRAD_OP", False),
        3: ("NO_SHARD", False),
        "hybrid_shard": ("HYBRID_SHARD", True),
        ShardingStrategy._HYBRID_SHARD_ZERO2: ("HYBRID_SHARD_ZERO2", False),
    }
    for given, expected in cases.items():
        plugin = FullyShardedDataParallelPlugin(sharding_strategy=given)
        assert (plugin.sharding_strategy, plugin.reshard_after_forward) == expected, given
    # Accelerate's FSDP1 plugin also took the strategy in reshard_after_forward.
    old_style = FullyShardedDataParallelPlugin(reshard_after_forward="SHARD_GRAD_OP")
    assert (old_style.sharding_strategy, old_style.reshard_after_forward) == ("SHARD_GRAD_OP", False)


def test_fsdp1_flags_that_fsdp2_already_honours_are_accepted_and_checked():
    from torch.distributed.fsdp import BackwardPrefetch

    plugin = FullyShardedDataParallelPlugin(
        backward_prefetch=BackwardPrefetch.BACKWARD_POST,
        forward_prefetch="true",
        limit_all_gathers=True,
        use_orig_params=False,
        sync_module_states=True,
        param_init_fn=lambda module: module.to_empty(device="cpu", recurse=False),
        cpu_ram_efficient_loading=True,
    )
    assert plugin.backward_prefetch == "BACKWARD_POST"
    assert plugin.forward_prefetch is True and plugin.use_orig_params is False


def test_fsdp1_mixed_precision_becomes_an_fsdp2_policy_saying_what_it_drops():
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy

    with pytest.warns(UserWarning, match=r"FSDP2 ignores buffer_dtype=torch.bfloat16"):
        plugin = FullyShardedDataParallelPlugin(
            mixed_precision_policy=MixedPrecision(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
            )
        )
    policy = plugin.mixed_precision_policy
    assert isinstance(policy, MixedPrecisionPolicy)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    from_dict = FullyShardedDataParallelPlugin(mixed_precision_policy={"param_dtype": "bf16"})
    assert from_dict.mixed_precision_policy.param_dtype is torch.bfloat16


def test_ignored_modules_name_modules_or_match_their_names():
    from accel_state.backends.fsdp.fsdp1_options import ignored_parameters

    model = Net()
    by_regex = ignored_parameters(model, r"blocks\.\d")
    assert by_regex == set(model.blocks.parameters())
    assert ignored_parameters(model, [model.head]) == set(model.head.parameters())
    assert ignored_parameters(model, None) == set()
