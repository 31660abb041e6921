"""`accel to-fsdp2`: an FSDP1 config file as `accelerate config` writes it, rewritten with FSDP2's keys,
loaded back by the config reader and handed to `accel launch` (with the runner replaced)."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.config.file import ConfigLocation, read_config
from accel_launch.config.schema import ConfigError
from accel_launch.converters.fsdp2_config import rewrite_to_fsdp2

# What Accelerate's `accelerate config` wrote for an FSDP1 job.
FSDP1_FILE = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: {strategy}
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_use_orig_params: true
  fsdp_version: 1
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""


def _write(tmp_path, text: str, name: str = "fsdp1.yaml"):  # noqa: ANN202 - a Path
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(*args: str):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(accel, ["to-fsdp2", *args])


def _refused(*args: str) -> str:
    result = _run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_fsdp1_file_becomes_fsdp2_keys_and_says_what_it_dropped(tmp_path):
    source = _write(tmp_path, FSDP1_FILE.format(strategy="FULL_SHARD"))
    target = tmp_path / "fsdp2.yaml"
    result = _run("--config_file", str(source), "--output_file", str(target))
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["fsdp_config"] == {
        "fsdp_activation_checkpointing": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": False,
        "fsdp_reshard_after_forward": True,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
        "fsdp_version": 2,
    }
    original = yaml.safe_load(source.read_text())
    assert {k: v for k, v in written.items() if k != "fsdp_config"} == {
        k: v for k, v in original.items() if k != "fsdp_config"
    }, "the rest of the file is kept as it is"
    for key in (
        "fsdp_backward_prefetch",
        "fsdp_forward_prefetch",
        "fsdp_sync_module_states",
        "fsdp_use_orig_params",
    ):
        assert f"accel to-fsdp2: dropped {key} (" in result.stdout, key
    assert "fsdp_sharding_strategy FULL_SHARD -> fsdp_reshard_after_forward true" in result.stdout
    assert f"wrote the FSDP2 config to {target}" in result.stdout
    assert source.read_text() == FSDP1_FILE.format(strategy="FULL_SHARD"), "the input is left alone"


def test_the_written_file_loads_and_launches(tmp_path, launched):
    source = _write(tmp_path, FSDP1_FILE.format(strategy="SHARD_GRAD_OP"))
    target = tmp_path / "fsdp2.yaml"
    assert _run("--config_file", str(source), "--output_file", str(target)).exit_code == 0
    values = read_config(ConfigLocation(target, explicit=True))
    assert values is not None and values["fsdp_config"]["fsdp_version"] == 2
    assert values["fsdp_config"]["fsdp_reshard_after_forward"] is False
    script = _write(tmp_path, "print('hi')\n", "train.py")
    result = CliRunner().invoke(accel, ["launch", "--config_file", str(target), str(script)])
    assert result.exit_code == 0, result.output
    env = launched[0][1]
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "FSDP"
    assert env["ACCEL_FSDP_VERSION"] == "2"
    assert env["ACCEL_FSDP_RESHARD_AFTER_FORWARD"] == "false"
    assert env["ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP"] == "BertLayer"
    assert "ACCEL_FSDP_SHARDING_STRATEGY" not in env


@pytest.mark.parametrize(
    ("value", "reshard"),
    [("FULL_SHARD", True), ("SHARD_GRAD_OP", False), ("NO_SHARD", False), ("HYBRID_SHARD", True),
     ("HYBRID_SHARD_ZERO2", False), (1, True), (2, False)],
)  # fmt: skip
def test_each_sharding_strategy_maps_as_accelerate_maps_it(value, reshard):
    rewrite = rewrite_to_fsdp2({"fsdp_config": {"fsdp_sharding_strategy": value}})
    assert rewrite.config["fsdp_config"] == {"fsdp_reshard_after_forward": reshard, "fsdp_version": 2}
    mesh_note = any("replicas x shards" in note for note in rewrite.notes)
    assert mesh_note == (str(value) in ("NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"))


def test_a_strategy_written_under_reshard_after_forward_and_local_state_dict_are_converted():
    # Newer `accelerate config` writes FSDP1's strategy under fsdp_reshard_after_forward.
    section = {"fsdp_reshard_after_forward": "SHARD_GRAD_OP", "fsdp_state_dict_type": "LOCAL_STATE_DICT"}
    rewrite = rewrite_to_fsdp2({"fsdp_config": section})
    assert rewrite.config["fsdp_config"] == {
        "fsdp_reshard_after_forward": False,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_version": 2,
    }
    assert section == {
        "fsdp_reshard_after_forward": "SHARD_GRAD_OP",
        "fsdp_state_dict_type": "LOCAL_STATE_DICT",
    }
    with pytest.raises(ConfigError, match="fsdp_config.fsdp_sharding_strategy"):
        rewrite_to_fsdp2({"fsdp_config": {"fsdp_sharding_strategy": "HALF_SHARD"}})


def test_an_fsdp2_file_or_one_without_fsdp_is_written_unchanged(tmp_path):
    source = _write(
        tmp_path, "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_use_orig_params: true\n"
    )
    result = _run("--config_file", str(source), "--output_file", str(tmp_path / "a.yaml"))
    assert result.exit_code == 0, result.output
    assert "already 2: nothing to convert" in result.stdout
    assert yaml.safe_load((tmp_path / "a.yaml").read_text()) == yaml.safe_load(source.read_text())
    plain = _write(tmp_path, "num_processes: 2\n", "plain.yaml")
    result = _run("--config_file", str(plain), "--output_file", str(tmp_path / "b.yaml"))
    assert result.exit_code == 0 and "no fsdp_config section" in result.stdout


def test_an_existing_output_is_refused_unless_overwrite(tmp_path):
    source = _write(tmp_path, FSDP1_FILE.format(strategy="FULL_SHARD"))
    target = _write(tmp_path, "num_processes: 1\n", "out.yaml")
    line = _refused("--config_file", str(source), "--output_file", str(target))
    assert line == f"accel to-fsdp2: {target} exists; pass --overwrite to replace it"
    assert target.read_text() == "num_processes: 1\n"
    assert _run("--config_file", str(source), "--output_file", str(target), "--overwrite").exit_code == 0
    assert yaml.safe_load(target.read_text())["fsdp_config"]["fsdp_version"] == 2
    # Without --output_file, --overwrite rewrites the config file itself (as Accelerate's does).
    assert "pass --output_file, or --overwrite" in _refused("--config_file", str(source))
    assert _run("--config_file", str(source), "--overwrite").exit_code == 0
    assert yaml.safe_load(source.read_text())["fsdp_config"]["fsdp_version"] == 2
    assert not list(tmp_path.glob("*.partial"))


def test_a_missing_bad_or_unknown_input_is_one_line_naming_it(tmp_path):
    out = str(tmp_path / "out.yaml")
    missing = tmp_path / "missing.yaml"
    assert _refused("--config_file", str(missing), "--output_file", out) == (
        f"accel to-fsdp2: {missing}: config file not found"
    )
    broken = _write(tmp_path, "fsdp_config: [\n", "broken.yaml")
    assert f"{broken}: invalid YAML" in _refused("--config_file", str(broken), "--output_file", out)
    empty = _write(tmp_path, "", "empty.yaml")
    assert f"{empty}: the config file is empty" in _refused("--config_file", str(empty), "--output_file", out)
    text = FSDP1_FILE.format(strategy="FULL_SHARD").replace(
        "  fsdp_version: 1\n", "  fsdp_version: 1\n  fsdp_made_up: 1\n"
    )
    unknown = _write(tmp_path, text, "unknown.yaml")
    line = _refused("--config_file", str(unknown), "--output_file", out)
    assert f"{unknown}: key 'fsdp_config.fsdp_made_up' is unknown" in line
    assert not (tmp_path / "out.yaml").exists(), "nothing is written for a file that would not load"
