"""`accel launch --use_fsdp` and `distributed_type: FSDP`: flags and the `fsdp_config:` section to the
workers' ACCEL_FSDP_* env vars, and every refusal in one line, with the runner replaced."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel

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

# What Accelerate's `accelerate config` writes for an FSDP2 job.
_ACCELERATE_FSDP_FILE = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_version: 2
mixed_precision: bf16
num_machines: 1
num_processes: 2
use_cpu: true
"""


@pytest.fixture(autouse=True)
def _no_fsdp_vars(monkeypatch):
    for name in (*FSDP_VARS, "ACCEL_DISTRIBUTED_TYPE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _launch(args: list[str], launched) -> dict[str, str]:
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 0, result.output
    assert len(launched) == 1
    return launched[0][1]


def _refused(args: list[str], launched) -> str:
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(lines) == 1, result.output
    assert launched == []
    return lines[0]


def test_use_fsdp_and_its_flags_reach_the_workers(script, launched):
    env = _launch(
        ["--cpu", "--num_processes", "2", "--use_fsdp", "--fsdp_version", "2",
         "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
         "--fsdp_transformer_layer_cls_to_wrap", "Block,Head",
         "--fsdp_min_num_params", "1000", "--fsdp_reshard_after_forward", "false",
         "--fsdp_state_dict_type", "FULL_STATE_DICT", "--fsdp_cpu_ram_efficient_loading", "true",
         "--fsdp_activation_checkpointing", "true", "--fsdp_offload_params", "false",
         "--fsdp_sharding_strategy", "SHARD_GRAD_OP", script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "FSDP"
    assert {name: env[name] for name in FSDP_VARS} == {
        "ACCEL_FSDP_VERSION": "2",
        "ACCEL_FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP": "Block,Head",
        "ACCEL_FSDP_MIN_NUM_PARAMS": "1000",
        "ACCEL_FSDP_RESHARD_AFTER_FORWARD": "false",
        "ACCEL_FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
        "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
        "ACCEL_FSDP_ACTIVATION_CHECKPOINTING": "true",
        "ACCEL_FSDP_OFFLOAD_PARAMS": "false",
        "ACCEL_FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP",
    }


def test_use_fsdp_alone_sets_only_the_distributed_type(script, launched):
    env = _launch(["--cpu", "--num_processes", "2", "--use_fsdp", script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "FSDP"
    assert not set(FSDP_VARS) & set(env)


def test_an_accelerate_fsdp_config_file_reaches_the_workers(tmp_path, script, launched):
    config = tmp_path / "acc.yaml"
    config.write_text(_ACCELERATE_FSDP_FILE)
    env = _launch(["--config_file", str(config), script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "FSDP"
    assert env["ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP"] == "BertLayer"
    assert env["ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true"
    assert env["ACCEL_FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"


# What Accelerate's `accelerate config` wrote for an FSDP1 job (FSDP2 runs it).
_ACCELERATE_FSDP1_FILE = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: {strategy}
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_use_orig_params: true
num_machines: 1
num_processes: 2
use_cpu: true
"""


@pytest.mark.parametrize(("strategy", "expected"), [("SHARD_GRAD_OP", "SHARD_GRAD_OP"), ("1", "1")])
def test_an_accelerate_fsdp1_config_file_runs_its_sharding_strategy(
    tmp_path, script, launched, strategy, expected
):
    config = tmp_path / "acc.yaml"
    config.write_text(_ACCELERATE_FSDP1_FILE.format(strategy=strategy))
    env = _launch(["--config_file", str(config), script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "FSDP"
    assert env["ACCEL_FSDP_SHARDING_STRATEGY"] == expected
    assert env["ACCEL_FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "  fsdp_sharding_stratgy: FULL_SHARD\n",
            "key 'fsdp_config.fsdp_sharding_stratgy' is unknown (did you mean 'fsdp_config.fsdp_sharding_",
        ),
        ("  fsdp_sharding_strategy: 7\n", "key 'fsdp_config.fsdp_sharding_strategy' must be one of"),
        (
            "  fsdp_state_dict_type: LOCAL_STATE_DICT\n",
            "key 'fsdp_config.fsdp_state_dict_type' must be one of",
        ),
        ("  fsdp_offload_params: maybe\n", "key 'fsdp_config.fsdp_offload_params' must be true or false"),
        ("  fsdp_version: 1\n", "key 'fsdp_config.fsdp_version' is 1: FSDP1 (the FullyShardedDataParallel"),
    ],
)
def test_a_bad_fsdp_key_or_value_in_the_file_is_one_line_naming_it(
    tmp_path, script, launched, section, expected
):
    config = tmp_path / "bad.yaml"
    config.write_text(f"distributed_type: FSDP\nuse_cpu: true\nnum_processes: 2\nfsdp_config:\n{section}")
    line = _refused(["--config_file", str(config), script], launched)
    assert str(config) in line and expected in line, line


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--fsdp_state_dict_type", "LOCAL_STATE_DICT"], "--fsdp_state_dict_type"),
        (["--fsdp_auto_wrap_policy", "EVERYTHING"], "--fsdp_auto_wrap_policy"),
        (
            ["--fsdp_version", "1"],
            "--fsdp_version is 1: FSDP1 (the FullyShardedDataParallel wrapper) is not supported",
        ),
    ],
)
def test_a_bad_fsdp_flag_is_one_line_naming_it(script, launched, flags, expected):
    line = _refused(["--cpu", "--num_processes", "2", "--use_fsdp", *flags, script], launched)
    assert expected in line, line


def test_an_fsdp_flag_without_fsdp_is_refused(script, launched):
    line = _refused(["--cpu", "--num_processes", "2", "--fsdp_offload_params", "true", script], launched)
    assert "--fsdp_offload_params is an FSDP option: add --use_fsdp" in line


def test_use_fsdp_contradicting_another_type_is_refused(script, launched):
    result = CliRunner().invoke(accel, ["launch", "--use_fsdp", "--distributed_type", "MULTI_CPU", script])
    assert result.exit_code == 2
    assert "--use_fsdp contradicts --distributed_type MULTI_CPU" in result.output
