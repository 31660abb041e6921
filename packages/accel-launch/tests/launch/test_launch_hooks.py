"""The launch hooks the CLI loops over: one registry (entry points), hooks free of torch and engines,
commands free of engine names, a stand-in's one-line install refusal, and a new backend added by
registering its hook alone (a throwaway hook in a temporary dist-info folder, in a subprocess).
Also the replica program every hook that starts its own replicas runs through."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import accel_launch
from accel_launch.commands.cli import accel
from accel_launch.launch import _replica_worker, runner
from accel_state.backends import adapter_stand_ins
from accel_state.seam import entry_points, launch_hook
from accel_state.seam.launch_hook import ENTRY_POINT_GROUP, LaunchHook, LaunchHookError, launch_hooks

SOURCES = Path(accel_launch.__file__).parent
# Every module of the commands and the config, the launcher's argument builder and its env check:
# they loop over hooks and name no engine, not even in a comment.
COMMAND_MODULES = tuple(
    sorted(
        str(path.relative_to(SOURCES))
        for path in [
            *SOURCES.glob("commands/*.py"),
            *SOURCES.glob("config/*.py"),
            SOURCES / "launch" / "torchrun_args.py",
            SOURCES / "launch" / "env_check.py",
        ]
    )
)
ENGINE_NAMES = re.compile("deepspeed|fsdp|xla", re.IGNORECASE)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_no_engine_name_appears_in_the_command_modules(module):
    lines = (SOURCES / module).read_text().splitlines()
    named = [
        f"{module}:{number}: {line.strip()}"
        for number, line in enumerate(lines, 1)
        if ENGINE_NAMES.search(line)
    ]
    assert named == []


def test_the_registry_reads_the_entry_points_importlib_metadata_reads():
    ours = sorted((entry.name, entry.value) for entry in entry_points.entry_points(ENTRY_POINT_GROUP))
    theirs = sorted(
        (entry.name, entry.value) for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )
    assert ours == theirs
    assert {"NATIVE", "FSDP", "DEEPSPEED", "XLA"} <= {name for name, _ in ours}


def test_every_hook_is_a_launch_hook_named_as_registered_native_first():
    hooks = launch_hooks()
    assert all(isinstance(hook, LaunchHook) and hook.name == name for name, hook in hooks.items())
    assert next(iter(hooks)) == "NATIVE"
    assert launch_hook.launchable_types()[:3] == ("NO", "MULTI_CPU", "MULTI_GPU")


def test_an_installed_adapter_replaces_its_stand_in():
    hooks = launch_hooks()
    for name in ("DEEPSPEED", "XLA"):
        installed = importlib.util.find_spec(f"accel_{name.lower()}") is not None
        assert hooks[name].stand_in is not installed


def test_a_hook_that_cannot_be_loaded_is_one_line_naming_its_entry_point():
    entry = entry_points.EntryPoint("BROKEN", "no_such_module_here:HOOK", "broken_dist")
    with pytest.raises(LaunchHookError) as info:
        launch_hook._load(entry)
    assert str(info.value).startswith(
        "launch hook BROKEN (no_such_module_here:HOOK, of broken_dist) cannot be loaded"
    )
    not_a_hook = entry_points.EntryPoint("NATIVE", "accel_state.seam.launch_hook:ENTRY_POINT_GROUP", "x")
    with pytest.raises(LaunchHookError, match="is not a LaunchHook named 'NATIVE'"):
        launch_hook._load(not_a_hook)


@pytest.mark.parametrize(
    ("name", "flag"), [("DEEPSPEED", "--use_deepspeed"), ("XLA", "--xla"), ("XLA", "--tpu")]
)
def test_without_its_adapter_an_engines_flag_is_one_line_naming_the_install(
    name, flag, script, launched, monkeypatch
):
    stand_in = getattr(adapter_stand_ins, name)
    monkeypatch.setitem(launch_hooks(), name, stand_in)
    result = CliRunner().invoke(accel, ["launch", flag, script])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"accel: {stand_in.install_hint}"
    assert (
        "pip install" in stand_in.install_hint and f"./packages/accel-{name.lower()}" in stand_in.install_hint
    )
    assert launched == []


def test_a_stand_ins_section_in_a_file_is_passed_over(tmp_path, script, launched, monkeypatch):
    # Older Accelerate files carry every section; a job of another type must not need its adapter.
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\ndeepspeed_config: {}\n")
    result = CliRunner().invoke(accel, ["launch", "--config_file", str(config), script])
    assert result.exit_code == 0, result.output
    assert launched[0][1]["ACCEL_DISTRIBUTED_TYPE"] == "MULTI_CPU"


@pytest.mark.slow
def test_hooks_and_the_help_import_no_torch_click_yaml_or_engine():
    code = textwrap.dedent(
        """
        import sys
        from accel_state.seam.launch_hook import launch_hooks
        hooks = launch_hooks()
        assert len(hooks) >= 4, hooks
        heavy = sorted(m for m in ("torch", "click", "yaml", "deepspeed", "torch_xla", "importlib.metadata")
                       if m in sys.modules)
        assert not heavy, heavy
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# A new backend: its own package and one registration line ------------------------------------

_TOY_HOOK = """
from accel_state.seam.launch_hook import ConfigKey, LaunchHook, Selector

HOOK = LaunchHook(
    name="TOY",
    title="Toy",
    distributed_types=("TOY",),
    cpu_types=("TOY",),
    selector=Selector(("use_toy",), "Run a toy job (distributed_type TOY)."),
    section="toy_config",
    keys=(ConfigKey("toy_level", "int", None, "How toy the job is.", minimum=0, env_var="TOY_LEVEL"),),
)
"""


@pytest.fixture
def toy_backend(tmp_path) -> dict[str, str]:
    """Return the env of a Python that sees a throwaway package registering launch hook TOY."""
    site = tmp_path / "site"
    (site / "toy_backend-0.1.dist-info").mkdir(parents=True)
    (site / "toy_backend.py").write_text(_TOY_HOOK)
    (site / "toy_backend-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n"
    )
    (site / "toy_backend-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nTOY = toy_backend:HOOK\n"
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _accel(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accel_launch.commands.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


@pytest.mark.slow
def test_a_registered_hook_brings_its_flags_and_its_env_var_reaches_the_worker(toy_backend, tmp_path):
    help_text = _accel(["launch", "--help"], toy_backend, tmp_path).stdout
    assert "--use_toy" in help_text and "--toy_level" in help_text and "How toy the job is." in help_text
    script = tmp_path / "job.py"
    script.write_text(
        "import os, pathlib\n"
        "seen = os.environ['ACCEL_DISTRIBUTED_TYPE'] + ' ' + os.environ['TOY_LEVEL']\n"
        "pathlib.Path('seen.txt').write_text(seen)\n"
    )
    result = _accel(["launch", "--use_toy", "--toy_level", "3", "--cpu", str(script)], toy_backend, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "seen.txt").read_text() == "TOY 3"
    refused = _accel(["launch", "--toy_level", "3", str(script)], toy_backend, tmp_path)
    assert refused.returncode == 2
    assert "--toy_level is a Toy option: add --use_toy (or set distributed_type: TOY)" in refused.stderr
    config = tmp_path / "toy.yaml"
    config.write_text("distributed_type: TOY\ntoy_config:\n  toy_levle: 1\n")
    misspelt = _accel(["config", "show", "--config_file", str(config)], toy_backend, tmp_path)
    assert misspelt.returncode == 2
    assert (
        f"{config}: key 'toy_config.toy_levle' is unknown (did you mean 'toy_config.toy_level'?)"
        in misspelt.stderr
    )


# The replica program --------------------------------------------------------------------------


def test_the_replica_program_parses_its_arguments():
    assert _replica_worker.parse(["12", "2", "train.py", "--x"]) == (12, 2, False, "train.py", ["--x"])
    assert _replica_worker.parse(["12", "1", "-m", "pkg.mod"]) == (12, 1, True, "pkg.mod", [])
    for bad in (["12"], ["x", "1", "a.py"], ["12", "0", "a.py"], ["12", "1", "-m"]):
        with pytest.raises(SystemExit, match="usage"):
            _replica_worker.parse(bad)


def test_each_replica_runs_the_script_as_main_with_its_arguments(tmp_path, monkeypatch):
    out = tmp_path / "seen.txt"
    path = tmp_path / "job.py"
    path.write_text(f"import sys\nopen({str(out)!r}, 'w').write(__name__ + ' ' + ' '.join(sys.argv))\n")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    _replica_worker.run_script(str(path), ["--lr", "3"], False)
    assert out.read_text() == f"__main__ {path} --lr 3"


def test_the_program_runner_reports_a_failed_job_in_one_line(capsys):
    code = runner.run_program(
        [sys.executable, "-c", "import sys; sys.exit(3)"], {"ACCEL_X": "1"}, job="XLA job"
    )
    assert code == 3
    assert capsys.readouterr().err.strip() == (
        "accel launch: the XLA job failed with exit code 3 (see its traceback above)"
    )
    check = [sys.executable, "-c", "import os; assert os.environ['ACCEL_X'] == '1'"]
    assert runner.run_program(check, {"ACCEL_X": "1"}) == 0


def test_a_replaced_hook_is_what_the_commands_see(monkeypatch):
    # The commands read the one registry dict: a test (or a plugin) replacing a hook replaces it everywhere.
    from accel_launch.config import effective as effective_config
    from accel_launch.config import schema as config_schema

    hooks = launch_hooks()
    assert config_schema.HOOKS is hooks
    fsdp = hooks["FSDP"]._replace(title="Replaced")
    monkeypatch.setitem(hooks, "FSDP", fsdp)
    assert effective_config.hook_of_type("FSDP") is fsdp


# The CLI as it is without accel-deepspeed: its entry points are hidden before the hooks are read.
_WITHOUT_DEEPSPEED = """
import sys
from accel_state.seam import entry_points, launch_hook
real = entry_points.entry_points
launch_hook.entry_points = lambda group, path=None: [
    e for e in real(group, path) if e.distribution != "accel_deepspeed"
]
from click.testing import CliRunner
from accel_launch.commands.cli import accel
result = CliRunner().invoke(accel, sys.argv[1:])
print(result.exit_code)
print(result.output)
"""


@pytest.mark.parametrize(
    "arguments",
    [
        ["launch", "--cpu", "--zero_stage", "2", "train.py"],
        ["launch", "--cpu", "--zero_stage=2", "train.py"],
        ["launch", "--zero3_init_flag", "true", "--cpu", "train.py"],
        ["config", "show", "--zero_stage", "2"],
    ],
)
def test_a_flag_of_an_adapter_that_is_not_installed_is_refused_with_its_install_line(tmp_path, arguments):
    (tmp_path / "train.py").write_text("print('ran')\n")
    found = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DEEPSPEED, *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ACCEL_CONFIG_FILE": str(tmp_path / "none.yaml")},
    )
    code, _, output = found.stdout.partition("\n")
    assert code == "2", found.stdout + found.stderr
    name = next(a for a in arguments if a.startswith("--z")).partition("=")[0]
    assert f"{name} is a DeepSpeed option." in output
    assert adapter_stand_ins.DEEPSPEED_INSTALL_HINT in " ".join(output.split())
    assert "ran" not in output
