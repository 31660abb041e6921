"""`accel config`, `accel config default/show`, `accel env` and config-file errors, through CliRunner."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from accel_launch.commands.cli import accel


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    for var in (
        "ACCEL_MIXED_PRECISION",
        "ACCEL_USE_CPU",
        "ACCEL_DEBUG_MODE",
        "ACCEL_GRADIENT_ACCUMULATION_STEPS",
    ):
        monkeypatch.delenv(var, raising=False)


def _write(path, text):
    path.write_text(text)
    return str(path)


def _argv_value(argv, flag):
    return argv[argv.index(flag) + 1]


# The questionnaire -----------------------------------------------------------------------------


def test_questionnaire_writes_the_answers_to_the_config_file(tmp_path):
    target = tmp_path / "cfg" / "my.yaml"
    # environment, type, machines, processes, parallelism config, torch.compile, debug, mixed precision,
    # accumulation
    answers = "\n".join(["", "MULTI_CPU", "1", "4", "n", "n", "n", "bf16", "2"]) + "\n"
    result = CliRunner().invoke(accel, ["config", "--config_file", str(target)], input=answers)
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["compute_environment"] == "LOCAL_MACHINE"
    assert written["distributed_type"] == "MULTI_CPU"
    assert written["num_processes"] == 4
    assert written["use_cpu"] is True
    assert written["mixed_precision"] == "bf16"
    assert written["gradient_accumulation_steps"] == 2
    assert f"config written to {target}" in result.output


def test_questionnaire_multi_machine_and_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_HOME", str(tmp_path))
    answers = ["", "MULTI_GPU", "2", "1", "10.0.0.1", "", "c10d", "y", "2", "0,1", "n", "n", "n", "fp16", ""]
    result = CliRunner().invoke(accel, ["config"], input="\n".join(answers) + "\n")
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "default_config.yaml").read_text())
    assert written["num_machines"] == 2
    assert written["machine_rank"] == 1
    assert written["main_process_ip"] == "10.0.0.1"
    assert written["main_process_port"] == 29500
    assert written["rdzv_backend"] == "c10d"
    assert written["gpu_ids"] == "0,1"
    assert written["gradient_accumulation_steps"] == 1


def test_questionnaire_rejects_a_bad_choice_and_asks_again(tmp_path):
    target = tmp_path / "c.yaml"
    answers = "\n".join(["", "QUANTUM", "NO", "y", "n", "n", "no", "1"]) + "\n"
    result = CliRunner().invoke(accel, ["config", "--config_file", str(target)], input=answers)
    assert result.exit_code == 0, result.output
    assert "QUANTUM" in result.output
    assert yaml.safe_load(target.read_text())["use_cpu"] is True


# config default / show ------------------------------------------------------------------------


def test_config_default_writes_a_cpu_config_here(tmp_path):
    target = tmp_path / "d.yaml"
    result = CliRunner().invoke(
        accel, ["config", "default", "--config_file", str(target), "--mixed_precision", "bf16"]
    )
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["use_cpu"] is True
    assert written["distributed_type"] == "NO"
    assert written["mixed_precision"] == "bf16"
    again = CliRunner().invoke(accel, ["config", "default", "--config_file", str(target)])
    assert again.exit_code == 2
    assert "already exists" in again.output
    assert (
        CliRunner().invoke(accel, ["config", "default", "--config_file", str(target), "--force"]).exit_code
        == 0
    )


def test_config_show_names_the_source_of_each_value(tmp_path, monkeypatch):
    config = _write(
        tmp_path / "c.yaml", "num_processes: 3\ndistributed_type: MULTI_CPU\nmixed_precision: fp16\n"
    )
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "4")
    result = CliRunner().invoke(
        accel, ["config", "show", "--config_file", config, "--mixed-precision", "bf16"]
    )
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0]: line for line in result.output.splitlines()}
    assert lines["config file"] == f"config file: {config}"
    assert lines["num_processes"].endswith("(file)") and " 3 " in lines["num_processes"]
    assert "'bf16'" in lines["mixed_precision"] and lines["mixed_precision"].endswith("(flag)")
    assert lines["gradient_accumulation_steps"].endswith("(env ACCEL_GRADIENT_ACCUMULATION_STEPS)")
    assert lines["num_machines"].endswith("(default)")


def test_config_file_found_through_accel_config_file(tmp_path, monkeypatch, launched, script):
    monkeypatch.setenv("ACCEL_CONFIG_FILE", _write(tmp_path / "env.yaml", "num_processes: 5\n"))
    assert CliRunner().invoke(accel, ["launch", script]).exit_code == 0
    assert _argv_value(launched[0][0], "--nproc_per_node") == "5"


def test_env_report_lists_versions_and_config(tmp_path):
    config = _write(tmp_path / "c.yaml", "mixed_precision: bf16\n")
    result = CliRunner().invoke(accel, ["env", "--config_file", config])
    assert result.exit_code == 0, result.output
    for needle in (
        "Python version",
        "torch version",
        "accel-launch version",
        "accel-state version",
        "deepspeed version",
        "CPU count",
        "Devices",
        f"Config file: {config}",
        "mixed_precision",
    ):
        assert needle in result.output, needle


# Launch from a config file ----------------------------------------------------------------------


def test_accelerate_style_file_launches_unchanged(tmp_path, launched, script):
    config = _write(tmp_path / "acc.yaml", (
        "compute_environment: LOCAL_MACHINE\ndebug: false\ndistributed_type: MULTI_CPU\ndowncast_bf16: 'no'\n"
        "enable_cpu_affinity: false\ngpu_ids: all\nmachine_rank: 0\nmain_training_function: main\n"
        "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 2\nrdzv_backend: static\nsame_network: true\n"
        "tpu_env: []\ntpu_use_cluster: false\ntpu_use_sudo: false\nuse_cpu: false\ndeepspeed_config: {}\n"
        "fsdp_config: {}\nmegatron_lm_config: {}\ndynamo_config: {}\n"
    ))  # fmt: skip
    result = CliRunner().invoke(accel, ["launch", "--config_file", config, script])
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert _argv_value(argv, "--nproc_per_node") == "2"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_USE_CPU"] == "1"
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "MULTI_CPU"


def test_flag_beats_file_and_file_beats_defaults(tmp_path, launched, script):
    config = _write(
        tmp_path / "c.yaml", "num_processes: 3\nmixed_precision: fp16\ngradient_accumulation_steps: 2\n"
    )
    result = CliRunner().invoke(
        accel, ["launch", "--config-file", config, "--mixed_precision", "bf16", script]
    )
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert _argv_value(argv, "--nproc_per_node") == "3"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "2"
    assert _argv_value(argv, "--rdzv_backend") == "accel-loopback"  # one machine


def test_bool_flag_can_turn_off_a_file_value(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "use_cpu: true\n")
    assert (
        CliRunner().invoke(accel, ["launch", "--config_file", config, "--no_use_cpu", script]).exit_code == 0
    )
    assert "ACCEL_USE_CPU" not in launched[0][1]


def test_c10d_log_dir_and_tee_reach_torchrun(tmp_path, launched, script):
    args = ["launch", "--rdzv_backend", "c10d", "--log_dir", str(tmp_path), "--tee", "3",
            "--num_machines", "2", "--main_process_ip", "10.0.0.1", "--main_process_port", "1234",
            script]  # fmt: skip
    assert CliRunner().invoke(accel, args).exit_code == 0
    argv, _ = launched[0]
    assert _argv_value(argv, "--rdzv_backend") == "c10d"
    assert _argv_value(argv, "--rdzv_endpoint") == "10.0.0.1:1234"
    assert _argv_value(argv, "--rdzv_conf") == "is_host=1"
    assert _argv_value(argv, "--log_dir") == str(tmp_path)
    assert _argv_value(argv, "--tee") == "3"


# Bad input: one line, exit code 2 ---------------------------------------------------------------

_BAD_FILES = [
    ("num_procesess: 2\n", "key 'num_procesess' is unknown (did you mean 'num_processes'?)"),
    ("num_processes: two\n", "key 'num_processes' must be an integer, got 'two'"),
    ("num_processes: 0\n", "key 'num_processes' must be at least 1, got 0"),
    ("mixed_precision: fp17\n", "key 'mixed_precision' must be one of no, fp16, bf16, fp8, got 'fp17'"),
    ("use_cpu: maybe\n", "key 'use_cpu' must be true or false"),
    ("num_machines: 2\nmachine_rank: 1\n", "key 'num_machines' is 2 but main_process_ip is not set"),
    (
        "num_machines: 2\nmachine_rank: 2\nmain_process_ip: h\n",
        "key 'machine_rank' must be below num_machines",
    ),
    ("distributed_type: 'NO'\nnum_processes: 2\n", "key 'distributed_type' is NO (one process)"),
    ("use_cpu: true\ndistributed_type: MULTI_GPU\n", "key 'distributed_type' is MULTI_GPU but"),
    ("distributed_type: MEGATRON_LM\n", "accel launch cannot start yet"),
    ("mixed_precision: fp8\n", "key 'mixed_precision' is fp8, which accel cannot run yet"),
    ("num_processes: [1\n", "invalid YAML at line 2"),
    ("- a\n- b\n", "the file must hold a mapping"),
    ("fsdp_config: 3\n", "key 'fsdp_config' must be a mapping"),
]


@pytest.mark.parametrize(("text", "message"), _BAD_FILES)
def test_bad_config_file_is_one_line_naming_file_and_key(text, message, tmp_path, launched, script):
    config = _write(tmp_path / "config.yaml", text)
    result = CliRunner().invoke(accel, ["launch", "--config_file", config, script])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"accel: {config}: "), lines[0]
    assert message in lines[0]
    assert launched == []


def test_missing_config_file_is_one_line(tmp_path, launched, script):
    missing = str(tmp_path / "nope.yaml")
    result = CliRunner().invoke(accel, ["launch", "--config_file", missing, script])
    assert result.exit_code == 2
    assert result.output.strip() == f"accel: {missing}: config file not found"


def test_bad_env_value_is_one_line(monkeypatch, launched, script):
    monkeypatch.setenv("ACCEL_USE_CPU", "perhaps")
    result = CliRunner().invoke(accel, ["launch", script])
    assert result.exit_code == 2
    assert result.output.strip().startswith("accel: environment variable ACCEL_USE_CPU='perhaps'")


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--machine_rank", "3"], "--machine_rank must be below num_machines"),
        (["--distributed_type", "NO", "--num_processes", "2"], "--distributed_type is NO"),
        (["--rdzv_backend", "etcd"], "etcd"),
        (["--tee", "5"], "--tee"),
        (["--num_processes", "two"], "--num_processes"),
        (["--mixed_precision", "fp8"], "--mixed_precision is fp8, which accel cannot run yet"),
    ],
)
def test_bad_launch_flag_combinations_exit_2(args, culprit, launched, script):
    result = CliRunner().invoke(accel, ["launch", *args, script])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and culprit in errors[0], result.output
    assert "Traceback" not in result.output


def test_show_reports_a_bad_file_in_one_line(tmp_path):
    config = _write(tmp_path / "c.yaml", "num_procesess: 2\n")
    result = CliRunner().invoke(accel, ["config", "show", "--config_file", config])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"accel: {config}: key 'num_procesess' is unknown (did you mean 'num_processes'?)"
    )


def test_accel_test_without_the_umbrella_says_so_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "accel" else real(name, *a)
    )
    result = CliRunner().invoke(accel, ["test"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("accel: accel test runs the checks of the `accel` package")
    # Never `pip install accel`: that is another project on PyPI.
    assert result.output.strip().endswith(
        "from the repository root: pip install -c constraints.txt ./packages/accel-state "
        "./packages/accel-data ./packages/accel-amp ./packages/accel-launch ./packages/accel-big-modeling "
        "./packages/accel"
    )


def test_config_file_given_to_the_group_is_used_by_its_subcommands(tmp_path):
    config = _write(tmp_path / "config.yaml", "foo: 1\n")
    result = CliRunner().invoke(accel, ["config", "--config_file", config, "show"])
    assert result.exit_code == 2 and f"accel: {config}: key 'foo' is unknown" in result.output
    other = _write(tmp_path / "other.yaml", "num_processes: 2\n")
    result = CliRunner().invoke(accel, ["config", "--config_file", config, "show", "--config_file", other])
    assert result.exit_code == 2 and "--config_file given twice" in result.output
