"""The torch.compile settings (Accelerate's `dynamo_config` and `--dynamo_*` flags): flags beat the
file's section, each reaches the workers as its ACCEL_DYNAMO_* variable, a misspelt key or an
unknown mode is one line naming it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_state.environment import env_vars


def _launch(args, launched):
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 0, result.output
    return launched[-1][1]


def _dynamo(env):
    return {name: value for name, value in env.items() if "DYNAMO" in name}


def test_accelerates_switches_reach_the_workers(launched, script):
    env = _launch(
        ["--cpu", "--num_processes", "2", "--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune",
         "--dynamo_use_fullgraph", "--dynamo_use_regional_compilation", script],
        launched,
    )  # fmt: skip
    assert _dynamo(env) == {
        env_vars.DYNAMO_BACKEND: "inductor",
        env_vars.DYNAMO_MODE: "max-autotune",
        env_vars.DYNAMO_USE_FULLGRAPH: "1",
        env_vars.DYNAMO_USE_REGIONAL_COMPILATION: "1",
    }


def test_the_files_section_is_read_and_a_flag_beats_it(launched, script, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n"
        "  dynamo_use_dynamic: true\n  dynamo_use_regional_compilation: true\n"
    )
    env = _launch(
        ["--config_file", str(path), "--cpu", "--num_processes", "1", "--no_dynamo_use_regional_compilation",
         script],
        launched,
    )  # fmt: skip
    assert _dynamo(env) == {
        env_vars.DYNAMO_BACKEND: "INDUCTOR",
        env_vars.DYNAMO_MODE: "default",
        env_vars.DYNAMO_USE_DYNAMIC: "1",
        env_vars.DYNAMO_USE_REGIONAL_COMPILATION: "0",
    }


def test_no_setting_means_no_variable(launched, script):
    assert _dynamo(_launch(["--cpu", "--num_processes", "1", script], launched)) == {}


def test_a_misspelt_key_and_an_unknown_mode_are_one_line_each(script, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("dynamo_config:\n  dynamo_use_fulgraph: true\n")
    result = CliRunner().invoke(accel, ["launch", "--config_file", str(path), "--cpu", script])
    assert result.exit_code != 0
    assert (
        "'dynamo_config.dynamo_use_fulgraph' is unknown (did you mean 'dynamo_config.dynamo_use_fullgraph'?)"
        in (result.output)
    )
    result = CliRunner().invoke(accel, ["launch", "--cpu", "--dynamo_mode", "fast", script])
    assert result.exit_code == 2 and "'fast' is not one of" in result.output


@pytest.mark.parametrize(
    "args, environ, section, where",
    [
        (["--dynamo_backend", "inductr"], {}, None, "--dynamo_backend is 'inductr'"),
        (
            [],
            {env_vars.DYNAMO_BACKEND: "Turbo"},
            None,
            f"environment variable {env_vars.DYNAMO_BACKEND} is 'Turbo'",
        ),
        (
            [],
            {},
            "dynamo_config:\n  dynamo_backend: INDUCTR\n",
            "key 'dynamo_config.dynamo_backend' is 'INDUCTR'",
        ),
    ],
)
def test_an_unknown_backend_is_refused_before_any_process_starts(
    launched, script, tmp_path, monkeypatch, args, environ, section, where
):
    # The workers would each fail on it, after the world started.
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if section is not None:
        (tmp_path / "config.yaml").write_text(section)
        args = [*args, "--config_file", str(tmp_path / "config.yaml")]
    result = CliRunner().invoke(accel, ["launch", "--cpu", "--num_processes", "1", *args, script])
    assert result.exit_code == 2, result.output
    assert where in result.output and "which is no torch.compile backend accel knows" in result.output
    assert launched == []


def test_accel_config_asks_for_torch_compile_and_accel_env_shows_its_cache(tmp_path, monkeypatch):
    import yaml

    target = tmp_path / "config.yaml"
    # environment, type, processes, parallelism config, torch.compile: yes, backend, mode, fullgraph,
    # dynamic, regional; debug, mixed precision, accumulation
    answers = ["", "MULTI_CPU", "1", "2", "n", "y", "inductor", "default", "n", "n", "y", "n", "no", "1"]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(target.read_text())["dynamo_config"] == {
        "dynamo_backend": "inductor",
        "dynamo_mode": "default",
        "dynamo_use_fullgraph": False,
        "dynamo_use_dynamic": False,
        "dynamo_use_regional_compilation": True,
    }
    monkeypatch.setenv("ACCEL_COMPILE_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(accel, ["env", "--config_file", str(target)])
    assert f"- torch.compile cache: {tmp_path / 'cache'}" in result.output, result.output
