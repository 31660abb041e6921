"""Tests of the `accel` command line that start no processes (the runner is replaced)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel, launch
from accel_launch.launch import runner


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--num_processes", "two"], "--num_processes"),
        (["--num-processes", "0"], "--num_processes"),
        (["--mixed_precision", "fp17"], "fp17"),
        (["--num_machines", "2"], "--main_process_ip"),
        (["--main_process_port", "port"], "--main_process_port"),
        (["--env", "NOVALUE"], "--env"),
        (["--num_procs", "2"], "--num_procs"),
    ],
)
def test_bad_flag_exits_2_with_one_line_naming_it(args, culprit, script, launched):
    result = CliRunner().invoke(accel, ["launch", *args, script])
    assert result.exit_code == 2, result.output
    errors = _error_lines(result.output)
    assert len(errors) == 1, result.output
    assert culprit in errors[0]
    assert "Traceback" not in result.output
    assert launched == []


def test_missing_script_exits_2_naming_it(tmp_path, launched):
    missing = str(tmp_path / "missing.py")
    result = CliRunner().invoke(accel, ["launch", "--num_processes", "2", missing])
    assert result.exit_code == 2
    assert _error_lines(result.output) == [f"Error: script not found: {missing}"]
    assert launched == []


def test_missing_script_argument_exits_2(launched):
    result = CliRunner().invoke(accel, ["launch"])
    assert result.exit_code == 2
    assert "SCRIPT" in _error_lines(result.output)[0]


_FLAG_VALUES = [
    ("num_processes", "3"),
    ("num_machines", "2"),
    ("machine_rank", "1"),
    ("main_process_ip", "10.1.2.3"),
    ("main_process_port", "4321"),
    ("mixed_precision", "fp16"),
    ("gradient_accumulation_steps", "8"),
    ("max_restarts", "2"),
    ("monitor_interval", "0.5"),
    ("env", "FOO=bar"),
    ("cpu", None),
    ("debug", None),
    ("module", None),
]


def _flag_args(spelling: str) -> list[str]:
    args = []
    for name, value in _FLAG_VALUES:
        flag = "--" + (name.replace("_", "-") if spelling == "dash" else name)
        args += [flag] if value is None else [flag, value]
    return args


def test_dash_and_underscore_spellings_launch_the_same_job(launched):
    for spelling in ("underscore", "dash"):
        result = CliRunner().invoke(accel, ["launch", *_flag_args(spelling), "pkg.train", "--x", "1"])
        assert result.exit_code == 0, result.output
    (argv_underscore, env_underscore), (argv_dash, env_dash) = launched
    assert argv_underscore == argv_dash
    assert env_underscore == env_dash
    assert env_dash["ACCEL_MIXED_PRECISION"] == "fp16"
    assert env_dash["FOO"] == "bar"
    assert argv_dash[-4:] in (["-m", "pkg.train", "--x", "1"], ["--module", "pkg.train", "--x", "1"])


def test_script_args_are_not_parsed_as_launch_flags(script, launched):
    result = CliRunner().invoke(accel, ["launch", script, "--num_processes", "9", "--help", "-m"])
    assert result.exit_code == 0, result.output
    argv, _ = launched[0]
    assert argv[argv.index("--nproc_per_node") + 1] == "1"
    assert argv[-5:] == [script, "--num_processes", "9", "--help", "-m"]


def test_no_flags_means_one_process_on_loopback(script, launched):
    result = CliRunner().invoke(accel, ["launch", script])
    assert result.exit_code == 0, result.output
    argv, env = launched[0]
    assert argv[argv.index("--nproc_per_node") + 1] == "1"
    assert argv[argv.index("--rdzv_endpoint") + 1].startswith("127.0.0.1:")
    assert {key: value for key, value in env.items() if not key.endswith("_SOCKET_IFNAME")} == {
        "ACCEL_LAUNCHED": "1"
    }


def test_launch_exit_code_is_the_jobs(script, monkeypatch):
    monkeypatch.setattr(runner, "run_torchrun", lambda argv, env, debug=False: 3)
    assert CliRunner().invoke(launch, [script]).exit_code == 3


@pytest.mark.slow
def test_help_does_not_import_torch():
    code = textwrap.dedent(
        """
        import sys
        from accel_launch.commands.cli import accel
        for args in (["--help"], ["launch", "--help"], ["config", "--help"], ["config", "show", "--help"],
                     ["config", "default", "--help"], ["test", "--help"], ["env", "--help"]):
            try:
                accel.main(args, prog_name="accel", standalone_mode=False)
            except SystemExit:
                pass
        heavy = sorted(m for m in ("torch", "yaml") if m in sys.modules)
        assert not heavy, heavy
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: accel launch" in result.stdout


@pytest.mark.slow
def test_the_group_help_lists_every_command_without_the_schema_hooks_or_options():
    code = textwrap.dedent(
        """
        import atexit, sys
        heavy = ("accel_launch.config.schema", "accel_state.seam.launch_hook", "accel_launch.launch.options")
        atexit.register(lambda: print("LOADED", sorted(m for m in heavy if m in sys.modules)))
        sys.argv = ["accel", "--help"]
        from accel_launch.commands.cli import main
        main()
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "LOADED []"
    listed = result.stdout.partition("Commands:")[2].split()
    assert {"config", "env", "estimate-memory", "launch", "plot", "test"} <= set(listed)


@pytest.mark.parametrize("limit", [20, 45, 74, 200])
def test_the_group_lists_each_command_with_its_own_short_help(limit):
    from accel_launch.commands.cli import COMMANDS

    for name, lazy in COMMANDS.items():
        command = accel.get_command(click.Context(accel), name)
        assert command is not None and command.name == name
        standing_in = click.Command(name, help=lazy.summary)
        assert standing_in.get_short_help_str(limit) == command.get_short_help_str(limit), name


def test_the_names_moved_out_of_the_cli_module_stay_importable_from_it():
    from accel_launch.commands import cli, launch_command

    assert cli.launch is launch_command.launch
    assert isinstance(cli.config, click.Group) and cli.config_show.name == "show"
    assert cli.TEST_SCRIPT_GROUP == "accel.test_scripts"
    assert "load_effective_config" in dir(cli)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = cli.nothing_here
    assert CliRunner().invoke(accel, ["nothing"]).exit_code == 2


@pytest.mark.slow
def test_config_show_reads_env_var_names_without_importing_torch(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("num_processes: 2\n")
    code = textwrap.dedent(
        f"""
        import sys
        from accel_launch.commands.cli import accel
        accel.main(["config", "show", "--config_file", {str(config)!r}],
                   prog_name="accel", standalone_mode=False)
        assert "accel_state.environment.env_vars" in sys.modules, "env_vars not read"
        assert "torch" not in sys.modules, "torch imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "mixed_precision:" in result.stdout


@pytest.mark.slow
def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "accel_launch.commands.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "launch" in result.stdout


@pytest.mark.slow
def test_accel_launch_console_entry_point_runs_the_launch_command():
    code = (
        "import sys; sys.argv = ['accel-launch', '--help']\n"
        "from accel_launch.commands.cli import launch_main\n"
        "launch_main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: accel-launch [OPTIONS] SCRIPT" in result.stdout
