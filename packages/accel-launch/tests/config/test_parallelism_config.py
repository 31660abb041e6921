"""The parallelism config (Accelerate's `parallelism_config`): its flags, file section and env vars
in precedence order, each refusal as one line naming the culprit, `accel config` and `config show`."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.config.effective import resolve_config
from accel_launch.config.file import ConfigLocation, read_config
from accel_launch.config.schema import ConfigError

SWITCH = "--use_parallelism_config"


def _write(path, text):
    path.write_text(text)
    return str(path)


def _resolve(path, flags=None, environ=None):
    values = read_config(ConfigLocation(path, "test")) if path is not None else None
    return resolve_config(values, flags or {}, path=path, environ=environ or {})


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(lines) == 1, result.output
    return lines[0]


def _launch(args, launched):
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 0, result.output
    return launched[-1][1]


# Flags, file section, env vars -------------------------------------------------------------------


def test_flags_reach_every_worker_as_the_accel_variables(launched, script):
    env = _launch(
        ["--cpu", "--num_processes", "4", SWITCH, "--parallelism_config_dp_replicate_size", "2",
         "--parallelism-config-tp-size", "2", script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_USE_PARALLELISM_CONFIG"] == "1"
    assert env["ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
    assert env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "1"
    assert env["ACCEL_PARALLELISM_CONFIG_TP_SIZE"] == "2"
    assert env["ACCEL_PARALLELISM_CONFIG_CP_SIZE"] == "1"


def test_without_the_switch_no_parallelism_variable_is_set(launched, script):
    env = _launch(["--cpu", "--num_processes", "2", script], launched)
    assert not [name for name in env if "PARALLELISM" in name]


def test_an_accelerate_file_section_turns_the_switch_on(tmp_path, launched, script):
    config = _write(
        tmp_path / "c.yaml",
        "num_processes: 4\nuse_cpu: true\nparallelism_config:\n"
        "  parallelism_config_cp_comm_strategy: allgather\n"
        "  parallelism_config_dp_replicate_size: 1\n  parallelism_config_dp_shard_size: 2\n"
        "  parallelism_config_tp_size: 2\n  parallelism_config_cp_size: 1\n",
    )
    env = _launch(["--config_file", config, script], launched)
    assert env["ACCEL_USE_PARALLELISM_CONFIG"] == "1"
    assert env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
    assert env["ACCEL_PARALLELISM_CONFIG_TP_SIZE"] == "2"


def test_the_no_switch_turns_a_files_section_off(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "parallelism_config:\n  parallelism_config_tp_size: 2\n")
    env = _launch(["--config_file", config, "--no_use_parallelism_config", script], launched)
    assert "ACCEL_USE_PARALLELISM_CONFIG" not in env
    assert "ACCEL_PARALLELISM_CONFIG_TP_SIZE" not in env


def test_precedence_defaults_file_env_flag(tmp_path):
    path = tmp_path / "c.yaml"
    _write(
        path,
        "num_processes: 8\nparallelism_config:\n  parallelism_config_dp_shard_size: 2\n"
        "  parallelism_config_tp_size: 4\n",
    )
    tp, shard, cp = (
        "parallelism_config_tp_size",
        "parallelism_config_dp_shard_size",
        "parallelism_config_cp_size",
    )
    file_only = _resolve(path)
    assert file_only["use_parallelism_config"] is True
    assert file_only.sources["use_parallelism_config"] == "file"
    assert file_only.where("use_parallelism_config") == f"{path}: section 'parallelism_config'"
    assert (file_only[tp], file_only.sources[tp]) == (4, "file")
    assert (file_only[cp], file_only.sources[cp]) == (1, "default")
    environ = {"ACCEL_PARALLELISM_CONFIG_TP_SIZE": "2", "ACCEL_PARALLELISM_CONFIG_CP_SIZE": "2"}
    with_env = _resolve(path, environ=environ)
    assert (with_env[tp], with_env.sources[tp]) == (2, "env")
    assert (with_env[shard], with_env.sources[shard]) == (2, "file")  # the file's, untouched
    flags = {tp: 1, "parallelism_config_dp_replicate_size": 2}
    with_flag = _resolve(path, flags, environ)
    assert (with_flag[tp], with_flag.sources[tp]) == (1, "flag")
    assert (with_flag[cp], with_flag.sources[cp]) == (2, "env")
    with pytest.raises(ConfigError, match="= 4, but the world size is 8"):
        _resolve(path, flags)  # 2 * 2 * 1 * 1 without the env's cp


def test_the_switch_from_the_environment(launched, script, monkeypatch):
    monkeypatch.setenv("ACCEL_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE", "2")
    env = _launch(["--cpu", "--num_processes", "2", script], launched)
    assert env["ACCEL_USE_PARALLELISM_CONFIG"] == "1"
    assert env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"


def test_world_size_counts_every_machine(launched, script):
    env = _launch(
        ["--cpu", "--num_processes", "2", "--num_machines", "2", "--main_process_ip", "10.0.0.5",
         "--main_process_port", "29511", "--machine_rank", "1", SWITCH,
         "--parallelism_config_dp_shard_size", "4", script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "4"


# Refusals: one line naming the culprit -----------------------------------------------------------


@pytest.mark.parametrize("dimension", ["dp_replicate", "dp_shard", "tp", "cp"])
def test_a_size_flag_below_one_is_refused(dimension, launched, script):
    flag = f"--parallelism_config_{dimension}_size"
    line = _one_error_line(CliRunner().invoke(accel, ["launch", SWITCH, flag, "0", script]))
    assert line == f"Error: {flag} must be at least 1, got 0"
    assert launched == []


def test_a_size_below_one_in_the_file_names_the_section_key(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "parallelism_config:\n  parallelism_config_tp_size: 0\n")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    assert (
        line
        == f"accel: {config}: key 'parallelism_config.parallelism_config_tp_size' must be at least 1, got 0"
    )
    assert launched == []


@pytest.mark.parametrize(("raw", "problem"), [("0", "must be at least 1"), ("two", "is not an integer")])
def test_a_bad_size_in_the_environment_names_the_variable(raw, problem, launched, script, monkeypatch):
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_CP_SIZE", raw)
    line = _one_error_line(CliRunner().invoke(accel, ["launch", SWITCH, script]))
    assert line.startswith("accel: environment variable ACCEL_PARALLELISM_CONFIG_CP_SIZE")
    assert problem in line
    assert launched == []


def test_sizes_that_do_not_multiply_to_the_world_size_name_each_size_and_the_world(launched, script):
    args = ["launch", "--cpu", "--num_processes", "4", SWITCH, "--parallelism_config_dp_shard_size", "2",
            "--parallelism_config_tp_size", "3", script]  # fmt: skip
    line = _one_error_line(CliRunner().invoke(accel, args))
    assert line == (
        "accel: parallelism_config sizes dp_replicate 1 (default) * "
        "dp_shard 2 (--parallelism_config_dp_shard_size) * tp 3 (--parallelism_config_tp_size) * "
        "cp 1 (default) = 6, but the world size is 4 "
        "(num_processes 4 (--num_processes)): the sizes must multiply to the world size"
    )
    assert launched == []


def test_the_world_size_of_several_machines_is_named_with_both_counts(tmp_path, launched, script):
    config = _write(
        tmp_path / "c.yaml",
        "num_processes: 2\nnum_machines: 2\nmain_process_ip: 10.0.0.5\nparallelism_config:\n"
        "  parallelism_config_dp_shard_size: 2\n",
    )
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    assert f"dp_shard 2 ({config}: key 'parallelism_config.parallelism_config_dp_shard_size')" in line
    assert f"the world size is 4 (num_processes 2 ({config}: key 'num_processes') * num_machines 2" in line
    assert launched == []


def test_a_size_flag_without_the_switch_is_refused_saying_to_add_it(launched, script):
    args = ["launch", "--num_processes", "2", "--parallelism_config_dp_shard_size", "2", script]
    line = _one_error_line(CliRunner().invoke(accel, args))
    assert line == (
        "Error: --parallelism_config_dp_shard_size is a parallelism config size, but use_parallelism_config "
        "is not set: add --use_parallelism_config (or set ACCEL_USE_PARALLELISM_CONFIG=1)"
    )
    assert launched == []


def test_a_size_from_the_environment_without_the_switch_is_refused(launched, script, monkeypatch):
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_TP_SIZE", "2")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--num_processes", "2", script]))
    assert line.startswith("accel: environment variable ACCEL_PARALLELISM_CONFIG_TP_SIZE is a parallelism")
    assert "add --use_parallelism_config" in line
    assert launched == []


def test_a_size_flag_with_the_switch_turned_off_names_what_turned_it_off(launched, script, monkeypatch):
    monkeypatch.setenv("ACCEL_USE_PARALLELISM_CONFIG", "0")
    args = ["launch", "--num_processes", "2", "--parallelism_config_tp_size", "2", script]
    line = _one_error_line(CliRunner().invoke(accel, args))
    assert "use_parallelism_config is false (environment variable ACCEL_USE_PARALLELISM_CONFIG)" in line
    assert launched == []


@pytest.mark.parametrize(
    "cpu_args", [["--cpu"], ["--distributed_type", "MULTI_CPU"]], ids=["cpu", "multi-cpu"]
)
def test_context_parallel_on_the_cpu_is_refused_saying_it_needs_cuda(cpu_args, launched, script):
    args = ["launch", *cpu_args, "--num_processes", "2", SWITCH, "--parallelism_config_cp_size", "2", script]
    line = _one_error_line(CliRunner().invoke(accel, args))
    assert line.startswith("Error: --parallelism_config_cp_size is 2 but ")
    assert "runs the job on the CPU: torch's context parallel needs CUDA attention kernels" in line
    assert launched == []


def test_an_unknown_key_in_the_section_suggests_the_closest(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "parallelism_config:\n  parallelism_config_dp_shard: 2\n")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    assert "key 'parallelism_config.parallelism_config_dp_shard' is unknown" in line
    assert "did you mean 'parallelism_config.parallelism_config_dp_shard_size'" in line


# accel config, config default, config show, env ---------------------------------------------------


def test_questionnaire_asks_the_sizes_for_several_processes(tmp_path):
    target = tmp_path / "c.yaml"
    # environment, type, machines, processes, GPU ids, parallelism config?, replicas, tp, cp, shard
    # (default: the rest of the world size), debug, mixed precision, accumulation
    answers = ["", "MULTI_GPU", "1", "8", "all", "y", "2", "2", "1", "", "n", "n", "no", "1"]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 2,
        "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 2,
        "parallelism_config_cp_size": 1,
    }
    assert "shard size (the sizes must multiply to the world size, 8)? [2]" in result.output


def test_questionnaire_on_the_cpu_does_not_ask_for_context_parallel(tmp_path):
    target = tmp_path / "c.yaml"
    answers = ["", "MULTI_CPU", "1", "4", "y", "1", "2", "", "n", "n", "no", "1"]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    assert result.exit_code == 0, result.output
    assert "context-parallel" not in result.output
    section = yaml.safe_load(target.read_text())["parallelism_config"]
    assert section["parallelism_config_cp_size"] == 1 and section["parallelism_config_dp_shard_size"] == 2


def test_questionnaire_refuses_sizes_that_do_not_fit_and_writes_nothing(tmp_path):
    target = tmp_path / "c.yaml"
    answers = ["", "MULTI_CPU", "1", "4", "y", "3", "1", "", "n", "n", "no", "1"]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    line = _one_error_line(result)
    assert "dp_replicate 3" in line and "the world size is 4" in line
    assert not target.exists()


def test_questionnaire_does_not_ask_for_one_process(tmp_path):
    target = tmp_path / "c.yaml"
    result = CliRunner().invoke(
        accel,
        ["config", "--config_file", str(target)],
        input="\n".join(["", "NO", "y", "n", "n", "no", "1"]) + "\n",
    )
    assert result.exit_code == 0, result.output
    assert "parallelism" not in result.output
    assert "parallelism_config" not in yaml.safe_load(target.read_text())


def test_config_default_writes_no_parallelism_config(tmp_path):
    target = tmp_path / "d.yaml"
    result = CliRunner().invoke(accel, ["config", "default", "--config_file", str(target)])
    assert result.exit_code == 0, result.output
    assert "parallelism" not in target.read_text()
    show = CliRunner().invoke(accel, ["config", "show", "--config_file", str(target)])
    line = next(line for line in show.output.splitlines() if line.startswith("use_parallelism_config:"))
    assert "False" in line and line.endswith("(default)")


def test_config_show_lists_each_size_and_where_it_came_from(tmp_path, monkeypatch):
    config = _write(
        tmp_path / "c.yaml",
        "num_processes: 8\nparallelism_config:\n  parallelism_config_tp_size: 2\n"
        "  parallelism_config_dp_shard_size: 4\n",
    )
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2")
    show = CliRunner().invoke(
        accel, ["config", "show", "--config_file", config, "--parallelism_config_dp_shard_size", "2"]
    )
    assert show.exit_code == 0, show.output
    lines = {line.split(":")[0]: line for line in show.output.splitlines()}
    assert lines["use_parallelism_config"].endswith("(file)")
    assert " 2 " in lines["parallelism_config_dp_replicate_size"]
    assert lines["parallelism_config_dp_replicate_size"].endswith(
        "(env ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE)"
    )
    assert " 2 " in lines["parallelism_config_dp_shard_size"]
    assert lines["parallelism_config_dp_shard_size"].endswith("(flag)")
    assert lines["parallelism_config_tp_size"].endswith("(file)")
    assert lines["parallelism_config_cp_size"].endswith("(default)")
    assert "parallelism_config:" not in lines  # the section is listed by its keys


def test_accel_env_lists_the_section(tmp_path, monkeypatch):
    config = _write(
        tmp_path / "c.yaml",
        "num_processes: 2\nparallelism_config:\n  parallelism_config_dp_shard_size: 2\n",
    )
    result = CliRunner().invoke(accel, ["env", "--config_file", config])
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert any(line.startswith("use_parallelism_config:") and line.endswith("(file)") for line in lines)
    shard = next(line for line in lines if line.startswith("parallelism_config_dp_shard_size:"))
    assert " 2 " in shard and shard.endswith("(file)")
