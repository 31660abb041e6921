"""A flag beats the file (the distributed type follows the counts), every section's keys are
checked, and each refusal names where its value came from: flag, file key or env var."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.config.effective import resolve_config
from accel_launch.config.file import ConfigLocation, read_config
from accel_launch.config.schema import STAND_IN_SECTIONS, ConfigError


def _write(path, text):
    path.write_text(text)
    return str(path)


def _argv_value(argv, flag):
    return argv[argv.index(flag) + 1]


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(lines) == 1, result.output
    return lines[0]


# A flag beats the file ------------------------------------------------------------------------


def test_num_processes_flag_beats_the_default_configs_distributed_type_no(tmp_path, launched, script):
    home = tmp_path / "home"
    runner = CliRunner()
    written = runner.invoke(accel, ["config", "default", "--config_file", str(home / "c.yaml")])
    assert written.exit_code == 0, written.output
    assert "distributed_type: 'NO'" in (home / "c.yaml").read_text()
    config = str(home / "c.yaml")
    result = runner.invoke(
        accel, ["launch", "--config_file", config, "--cpu", "--num_processes", "2", script]
    )
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert _argv_value(argv, "--nproc_per_node") == "2"
    assert env["ACCEL_USE_CPU"] == "1"
    assert "ACCEL_DISTRIBUTED_TYPE" not in env  # inferred again from the counts: MULTI_CPU


def test_config_show_says_which_value_gave_way(tmp_path):
    config = _write(tmp_path / "c.yaml", "distributed_type: 'NO'\nnum_processes: 1\n")
    result = CliRunner().invoke(accel, ["config", "show", "--config_file", config, "--num_processes", "2"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("distributed_type"))
    assert f"{config}: key 'distributed_type' NO gave way to --num_processes 2" in line


def test_a_distributed_type_flag_beats_the_files_count(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "num_processes: 4\n")
    result = CliRunner().invoke(
        accel, ["launch", "--config_file", config, "--distributed_type", "NO", script]
    )
    assert result.exit_code == 0, result.output
    assert _argv_value(launched[0][0], "--nproc_per_node") == "1"


def test_a_cpu_flag_beats_the_files_multi_gpu(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\n")
    result = CliRunner().invoke(accel, ["launch", "--config_file", config, "--cpu", script])
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert _argv_value(argv, "--nproc_per_node") == "2" and env["ACCEL_USE_CPU"] == "1"
    assert "ACCEL_DISTRIBUTED_TYPE" not in env


def test_an_engine_type_flag_beats_the_files_use_cpu():
    # `accel config default` on a machine without a GPU writes `use_cpu: true`; `--xla` still runs XLA.
    config = resolve_config({"use_cpu": True}, {"distributed_type": "XLA"}, environ={})
    assert config.given("distributed_type") == "XLA" and config["use_cpu"] is False
    assert "use_cpu" in config.overridden


def test_a_cpu_flag_does_not_guess_an_engine_type_away(tmp_path):
    with pytest.raises(ConfigError, match="key .distributed_type. is XLA but --use_cpu is true"):
        resolve_config({"distributed_type": "XLA"}, {"use_cpu": True}, path=tmp_path / "c.yaml", environ={})


def test_an_env_var_beats_the_file_too():
    config = resolve_config({"distributed_type": "MULTI_GPU"}, {}, environ={"ACCEL_USE_CPU": "1"})
    assert config.given("distributed_type") is None and config["use_cpu"] is True


@pytest.mark.parametrize(
    ("file_values", "flags", "message"),
    [
        ({"distributed_type": "NO", "num_processes": 2}, {}, "key 'distributed_type' is NO (one process)"),
        ({}, {"distributed_type": "NO", "num_processes": 2}, "--distributed_type is NO"),
        ({}, {"distributed_type": "MULTI_GPU", "use_cpu": True}, "--distributed_type is MULTI_GPU"),
    ],
)
def test_contradictions_at_one_level_are_still_refused(file_values, flags, message, tmp_path):
    with pytest.raises(ConfigError) as raised:
        resolve_config(file_values, flags, path=tmp_path / "c.yaml", environ={})
    assert message in str(raised.value)


# `accel config` without a terminal --------------------------------------------------------------


def test_config_without_a_terminal_says_how_to_run_it_without_questions(tmp_path):
    target = tmp_path / "c.yaml"
    result = CliRunner().invoke(accel, ["config", "--config_file", str(target)], input="")
    assert result.exit_code == 2, result.output
    assert "Aborted" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("accel: accel config asks questions, but stdin is not a terminal")
    assert "`accel config default [--config_file FILE]`" in line and "--config_file FILE" in line
    assert not target.exists()


# Every section's keys are checked ---------------------------------------------------------------

_UNKNOWN_SECTION_KEYS = [
    ("dynamo_config", "dynamo_backnd", "dynamo_backend"),
    ("dynamo_config", "dynamo_use_fulgraph", "dynamo_use_fullgraph"),
    ("fp8_config", "margn", "margin"),
    ("ipex_config", "ipx", "ipex"),
    ("mpirun_config", "mpirun_hostfil", "mpirun_hostfile"),
    ("megatron_lm_config", "megatron_lm_tp_degre", "megatron_lm_tp_degree"),
    ("parallelism_config", "parallelism_config_tp_sise", "parallelism_config_tp_size"),
    ("tp_config", "tp_sise", "tp_size"),
    ("deepspeed_config", "deepspeed_hostfil", "deepspeed_hostfile"),
]


@pytest.mark.parametrize(("section", "key", "close"), _UNKNOWN_SECTION_KEYS)
def test_an_unknown_key_in_any_section_is_one_line_with_the_closest_name(
    section, key, close, tmp_path, launched, script
):
    config = _write(tmp_path / "c.yaml", f"{section}:\n  {key}: 1\n")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    if section in STAND_IN_SECTIONS:  # the adapter that knows the section's keys is not installed
        hook = STAND_IN_SECTIONS[section]
        assert line.startswith(f"accel: {config}: section '{section}' is read by the {hook.title} adapter, ")
        assert "which is not installed, so its keys cannot be checked" in line
        assert str(hook.install_hint) in line
    else:
        assert (
            line == f"accel: {config}: key '{section}.{key}' is unknown (did you mean '{section}.{close}'?)"
        )
    assert launched == []


def test_a_section_of_an_adapter_that_is_not_installed_is_refused_naming_its_install_line(
    tmp_path, launched, script
):
    """Its keys cannot be checked without the adapter: a file setting any is refused, never passed over."""
    if not STAND_IN_SECTIONS:
        pytest.skip(
            "every adapter that reads a config section is installed here: its own hook checks the keys"
        )
    for section, hook in STAND_IN_SECTIONS.items():
        config = _write(
            tmp_path / f"{section}.yaml", f"distributed_type: MULTI_CPU\n{section}:\n  anything: 1\n"
        )
        line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
        assert f"section '{section}' is read by the {hook.title} adapter" in line
        assert str(hook.install_hint) in line
    assert launched == []


def test_an_unknown_key_without_a_close_name_is_named_alone(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ipex_config:\n  zzzz: 1\n")
    with pytest.raises(ConfigError) as raised:
        read_config(ConfigLocation(path, explicit=True))
    assert str(raised.value) == f"{path}: key 'ipex_config.zzzz' is unknown"


def test_accelerates_own_section_keys_are_accepted(tmp_path, launched, script):
    config = _write(tmp_path / "acc.yaml", (
        "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n"
        "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n  dynamo_use_fullgraph: false\n"
        "  dynamo_use_dynamic: false\n  dynamo_use_regional_compilation: false\n"
        "ipex_config:\n  ipex: false\n  use_xpu: false\n"
        "mpirun_config:\n  mpirun_hostfile: ~/hostfile\n  mpirun_ccl: 1\n"
        "fp8_config:\n  backend: TE\n  fp8_format: HYBRID\n  margin: 0\n  interval: 1\n"
        "  amax_history_length: 1024\n  amax_compute_algorithm: max\n  use_autocast_during_eval: false\n"
        "  override_linear_precision: [false, false, false]\n"
        "megatron_lm_config:\n  megatron_lm_tp_degree: 1\n  megatron_lm_pp_degree: 1\n"
        "  megatron_lm_recompute_activations: true\n  megatron_lm_use_distributed_optimizer: true\n"
        "  megatron_lm_gradient_clipping: 1.0\n"
        "parallelism_config:\n  parallelism_config_dp_replicate_size: 1\n"
        "  parallelism_config_dp_shard_size: 2\n"
        "  parallelism_config_tp_size: 1\n  parallelism_config_cp_size: 1\n"
        "  parallelism_config_cp_comm_strategy: allgather\n"
        "tp_config: {}\ndeepspeed_config: {}\nfsdp_config: {}\n"
    ))  # fmt: skip
    result = CliRunner().invoke(accel, ["launch", "--config_file", config, script])
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert _argv_value(argv, "--nproc_per_node") == "2"
    assert env["ACCEL_DYNAMO_BACKEND"] == "INDUCTOR"


# A taken --main_process_port ---------------------------------------------------------------------


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_taken_port_flag_is_refused_before_any_rank_starts(taken_port, launched, script):
    args = ["launch", "--cpu", "--num_processes", "2", "--main_process_port", str(taken_port), script]
    line = _one_error_line(CliRunner().invoke(accel, args))
    assert line.startswith(f"Error: --main_process_port is {taken_port}, but the rendezvous cannot listen")
    assert "127.0.0.1" in line and "Address already in use" in line
    assert launched == []


def test_a_taken_port_from_the_file_names_the_key_and_the_flag(taken_port, tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", f"main_process_port: {taken_port}\n")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    assert line.startswith(f"accel: {config}: key 'main_process_port' is {taken_port}, but")
    assert "override it with --main_process_port" in line
    assert launched == []


def test_a_free_port_is_passed_on(launched, script):
    from accel_launch.rendezvous.ports import find_free_port

    port = find_free_port()
    result = CliRunner().invoke(accel, ["launch", "--main_process_port", str(port), script])
    assert result.exit_code == 0, result.output
    assert _argv_value(launched[0][0], "--rdzv_endpoint") == f"127.0.0.1:{port}"


def test_only_the_rendezvous_host_checks_the_port(taken_port, launched, script):
    args = ["launch", "--num_machines", "2", "--machine_rank", "1", "--main_process_ip", "10.0.0.1",
            "--main_process_port", str(taken_port), script]  # fmt: skip
    assert CliRunner().invoke(accel, args).exit_code == 0  # machine 1 only connects to it
    assert len(launched) == 1


# Where a refused value came from ----------------------------------------------------------------


def test_a_process_count_too_large_in_the_file_names_the_file_key(tmp_path, launched, script):
    config = _write(tmp_path / "c.yaml", "num_processes: 1000000\n")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", "--config_file", config, script]))
    assert line.startswith(f"accel: {config}: key 'num_processes' is 1000000, more than this machine can run")
    assert "--num_processes" not in line
    assert launched == []


def test_a_refused_accumulation_env_var_is_named(monkeypatch, launched, script):
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "0")
    line = _one_error_line(CliRunner().invoke(accel, ["launch", script]))
    assert line.startswith("accel: environment variable ACCEL_GRADIENT_ACCUMULATION_STEPS")
    assert launched == []


# Unknown ACCEL_* variables ----------------------------------------------------------------------


def test_an_unknown_accel_variable_is_warned_of_once_with_the_closest_name(monkeypatch, launched, script):
    monkeypatch.setenv("ACCEL_MIXED_PRECISON", "bf16")
    result = CliRunner().invoke(
        accel, ["launch", "--num_processes", "2", "--env", "ACCEL_DEBUG_MOD=1", script]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("accel: warning:")]
    assert warnings == [
        "accel: warning: environment variable ACCEL_MIXED_PRECISON is not one accel reads; it is ignored "
        "(did you mean ACCEL_MIXED_PRECISION?)",
        "accel: warning: --env ACCEL_DEBUG_MOD is not one accel reads; it is ignored "
        "(did you mean ACCEL_DEBUG_MODE?)",
    ]
    assert launched[0][1]["ACCEL_LAUNCHED"] == "1"  # the ranks, told so, stay quiet
