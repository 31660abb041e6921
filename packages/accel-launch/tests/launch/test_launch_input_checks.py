"""Bad input `accel launch` refuses before it starts anything: one line, exit code 2, nothing launched."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.config.file import ConfigLocation, read_config
from accel_launch.config.schema import ConfigError
from accel_launch.launch import env_check
from accel_launch.launch._worker_exec import script_command
from accel_launch.launch.machine_limits import MachineLimits, check_process_count, machine_limits
from accel_launch.launch.options import LaunchOptionsError
from accel_state.environment import env_vars
from accel_state.seam.launch_hook import launch_hooks


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _refused(args: list[str]) -> list[str]:
    """Invoke `accel launch ARGS` and return its error lines, checking it failed with exit code 2."""
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(errors) == 1, result.output
    return errors


# Process counts no machine can run ---------------------------------------------------------------


def test_launch_refuses_more_processes_than_the_machine_can_run(script, launched):
    (error,) = _refused(["--num_processes", "100000", script])
    assert error.startswith("Error: --num_processes 100000 is more than this machine can run: ")
    assert launched == []


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (MachineLimits(user_processes=4096), "the per-user process limit (ulimit -u, RLIMIT_NPROC) is 4096"),
        (MachineLimits(process_ids=4096), "at most 4096 process ids (kernel.pid_max)"),
        (MachineLimits(memory_bytes=2**30), "its 1.0 GiB of memory hold at most 16 processes of 64 MiB"),
    ],
)
def test_process_count_names_the_limit_it_exceeds(limits, reason):
    with pytest.raises(LaunchOptionsError) as info:
        check_process_count(5000, limits)
    assert str(info.value).startswith("--num_processes 5000 is more than this machine can run: ")
    assert reason in str(info.value)


def test_process_counts_within_the_limits_pass():
    check_process_count(16, MachineLimits(user_processes=17, process_ids=32768, memory_bytes=2**30))
    check_process_count(2)  # this machine
    limits = machine_limits()
    assert limits.memory_bytes is None or limits.memory_bytes > 2**20


# ACCEL_* env vars the ranks would choke on ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("ACCEL_TIMEOUT", "abc", "is not a number of seconds"),
        ("ACCEL_TIMEOUT", "-5", "must be a finite number of seconds above 0"),
        ("ACCEL_TIMEOUT", "nan", "must be a finite number of seconds above 0"),
        ("ACCEL_DISTRIBUTED_TYPE", "TPU", "must be one of NO, MULTI_CPU, MULTI_GPU"),
        ("ACCEL_USE_CPU", "maybe", "is not a boolean"),
    ],
)
def test_launch_refuses_a_bad_accel_env_var_naming_it(name, value, problem, script, launched, monkeypatch):
    monkeypatch.setenv(name, value)
    (error,) = _refused([script])
    assert error.startswith(f"accel: environment variable {name}={value!r} ")
    assert problem in error
    assert launched == []


def test_launch_refuses_a_bad_accel_var_given_with_env_flag(script, launched):
    (error,) = _refused(["--env", "ACCEL_TIMEOUT=abc", script])
    assert error == "Error: --env ACCEL_TIMEOUT='abc' is not a number of seconds"
    assert launched == []


def test_good_accel_env_vars_launch(script, launched, monkeypatch):
    monkeypatch.setenv("ACCEL_TIMEOUT", "12.5")
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "multi_cpu")
    monkeypatch.setenv("ACCEL_DYNAMO_BACKEND", "inductor")
    assert CliRunner().invoke(accel, ["launch", script]).exit_code == 0
    assert len(launched) == 1


def test_every_accel_env_var_of_the_library_is_checked():
    names = {value for value in vars(env_vars).values() if str(value).startswith("ACCEL_")}
    assert names, "no ACCEL_* names found in accel_state.environment.env_vars"
    # An adapter that is not installed brings no checks: its stand-in names the variables it would.
    stand_ins = {name for hook in launch_hooks().values() if hook.stand_in for name in hook.adapter_env_vars}
    assert sorted(names - set(env_check.env_checks()) - stand_ins) == []


def test_the_core_checks_name_no_engine_variable():
    engines = {key.env_var for hook in launch_hooks().values() for key in hook.keys if key.env_var}
    engines |= {name for hook in launch_hooks().values() for name in hook.adapter_env_vars}
    assert sorted(set(env_check.CHECKS) & engines) == []


# Duplicate keys in a config file ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.yaml", "num_processes: 2\nmixed_precision: bf16\nnum_processes: 3\n",
         "key 'num_processes' is given twice (lines 1 and 3)"),
        ("c.yaml", "deepspeed_config:\n  zero_stage: 1\n  zero_stage: 2\n",
         "key 'zero_stage' is given twice (lines 2 and 3)"),
        ("c.json", '{"num_processes": 2, "num_processes": 3}', "key 'num_processes' is given twice"),
    ],
)  # fmt: skip
def test_config_file_with_a_key_given_twice_is_refused_naming_file_and_key(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_config(ConfigLocation(path, explicit=True))
    assert str(info.value) == f"{path}: {message}"


def test_launch_with_a_duplicate_key_file_exits_2(tmp_path, script, launched):
    config = tmp_path / "c.yaml"
    config.write_text("num_processes: 2\nnum_processes: 3\n")
    (error,) = _refused(["--config_file", str(config), script])
    assert error == f"accel: {config}: key 'num_processes' is given twice (lines 1 and 2)"
    assert launched == []


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "megatron_lm_config:\n  <<: {megatron_lm_tp_degree: 1, megatron_lm_pp_degree: 2}\n"
        "  megatron_lm_tp_degree: 3\n"
    )
    assert read_config(ConfigLocation(path, explicit=True)) == {
        "megatron_lm_config": {"megatron_lm_tp_degree": 3, "megatron_lm_pp_degree": 2}
    }


# --log_dir that cannot hold logs -----------------------------------------------------------------


def test_launch_refuses_a_log_dir_that_is_a_file(tmp_path, script, launched):
    not_a_folder = tmp_path / "logs"
    not_a_folder.write_text("")
    (error,) = _refused(["--log_dir", str(not_a_folder), script])
    assert error == f"Error: --log_dir is not a folder: {not_a_folder}"
    assert launched == []


def test_launch_refuses_a_log_dir_below_a_file(tmp_path, script, launched):
    file = tmp_path / "logs"
    file.write_text("")
    (error,) = _refused(["--log_dir", str(file / "run1"), script])
    assert error == f"Error: --log_dir cannot be created: {file} is not a folder ({file / 'run1'})"
    assert launched == []


def test_launch_accepts_a_log_dir_still_to_be_created(tmp_path, script, launched):
    result = CliRunner().invoke(accel, ["launch", "--log_dir", str(tmp_path / "new" / "logs"), script])
    assert result.exit_code == 0, result.output
    assert len(launched) == 1


# The worker's first program ----------------------------------------------------------------------


def test_worker_exec_becomes_python_with_the_same_flags_and_the_script():
    orig_argv = ["/venv/bin/python", "-u", "-X", "dev", "/pkg/_worker_exec.py", "7", "-m", "mod", "--x", "1"]
    argv = ["/pkg/_worker_exec.py", "7", "-m", "mod", "--x", "1"]
    assert script_command(orig_argv, argv, "/venv/bin/python") == [
        "/venv/bin/python", "-u", "-X", "dev", "-m", "mod", "--x", "1",
    ]  # fmt: skip
