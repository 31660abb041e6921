"""`accel launch --use_deepspeed` and `distributed_type: DEEPSPEED`: flags and config file to the
workers' env vars, and every refusal, with the runner replaced (no DeepSpeed process starts).

DeepSpeed's launch hook ships with accel-deepspeed (torch-free, deepspeed-free): these tests need
the adapter installed (the deepspeed session); without it, test_launch_hooks checks the stand-in."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from click.testing import CliRunner

from accel_launch.commands import env_report
from accel_launch.commands.cli import accel
from accel_launch.config.schema import ConfigError
from accel_launch.launch import env_check
from accel_launch.launch.options import LaunchOptions
from accel_launch.launch.torchrun_args import worker_env
from accel_state.seam.launch_hook import WorkerJob

deepspeed_launch = pytest.importorskip("accel_deepspeed.launch.hook")
INSTALL_HINT = deepspeed_launch.INSTALL_HINT
deepspeed_env = deepspeed_launch.deepspeed_env
json_config_problem = deepspeed_launch.json_config_problem
visible_gpu = deepspeed_launch.visible_gpu

DEEPSPEED_VARS = (
    "ACCEL_GRADIENT_CLIPPING",
    "ACCEL_DEEPSPEED_CONFIG_FILE",
    "ACCEL_DEEPSPEED_ZERO_STAGE",
    "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
    "ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
    "ACCEL_DEEPSPEED_ZERO3_INIT",
    "ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
    "DS_ACCELERATOR",
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


@pytest.fixture
def ds_json(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}))
    return path


@pytest.fixture(autouse=True)
def _deepspeed_installed(monkeypatch):
    """Pretend accel-deepspeed and deepspeed are installed, and that this machine has a GPU."""
    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name in deepspeed_launch.REQUIRED_MODULES:
            return object()
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(deepspeed_launch, "visible_gpu", lambda environ: True)
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _launch(args: list[str], launched) -> dict[str, str]:
    """Run `accel launch ARGS`, check it launched once, and return the env vars it gave the workers."""
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 0, result.output
    assert len(launched) == 1
    return launched[0][1]


def _refused(args: list[str], launched) -> str:
    """Run `accel launch ARGS`, check it failed in one line with exit code 2, and return that line."""
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(lines) == 1, result.output
    assert launched == []
    return lines[0]


def _write(path, text):
    path.write_text(text)
    return str(path)


def _deepspeed_env(env: dict[str, str]) -> dict[str, str]:
    return {name: env[name] for name in DEEPSPEED_VARS if name in env}


# Flags -> worker env ---------------------------------------------------------------------------


def test_every_deepspeed_flag_reaches_the_workers(script, ds_json, launched):
    env = _launch(
        ["--use_deepspeed", "--deepspeed_config_file", str(ds_json), "--zero_stage", "3",
         "--offload_optimizer_device", "cpu", "--offload_param_device", "nvme", "--gradient_clipping", "1.5",
         "--zero3_init_flag", "true", "--zero3_save_16bit_model", "false",
         "--deepspeed_multinode_launcher", "standard", "--mixed_precision", "bf16",
         "--gradient_accumulation_steps", "4", "--num_processes", "2", script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
    assert _deepspeed_env(env) == {
        "ACCEL_GRADIENT_CLIPPING": "1.5",
        "ACCEL_DEEPSPEED_CONFIG_FILE": str(ds_json),
        "ACCEL_DEEPSPEED_ZERO_STAGE": "3",
        "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
        "ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "nvme",
        "ACCEL_DEEPSPEED_ZERO3_INIT": "true",
        "ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "false",
    }
    argv = launched[0][0]
    assert argv[argv.index("--nproc_per_node") + 1] == "2"
    # torch's agent, not DeepSpeed's runner (`deepspeed`, `-m deepspeed.launcher.runner`); the venv's
    # own path may name deepspeed.
    head = argv[: argv.index(script)]
    assert not any(part.split("/")[-1] == "deepspeed" or "deepspeed.launcher" in part for part in head), head


def test_use_deepspeed_alone_sets_only_the_distributed_type(script, launched):
    env = _launch(["--use-deepspeed", script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert _deepspeed_env(env) == {}  # the adapter's defaults apply; a GPU is there (fixture)


def test_dashed_spellings_and_boolean_words_are_accepted(script, launched):
    env = _launch(
        ["--use_deepspeed", "--zero-stage", "1", "--zero3-init-flag", "0", "--zero3-save-16bit-model", "yes",
         "--offload-optimizer-device", "none", script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "1"
    assert env["ACCEL_DEEPSPEED_ZERO3_INIT"] == "false"
    assert env["ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"] == "true"
    assert env["ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"] == "none"


def test_a_relative_json_path_reaches_the_workers_absolute(tmp_path, script, launched, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "rel.json", "{}")
    env = _launch(["--use_deepspeed", "--deepspeed_config_file", "rel.json", script], launched)
    assert env["ACCEL_DEEPSPEED_CONFIG_FILE"] == str(tmp_path / "rel.json")


# DS_ACCELERATOR --------------------------------------------------------------------------------


def test_cpu_flag_makes_deepspeed_use_its_cpu_accelerator(script, launched):
    env = _launch(["--use_deepspeed", "--cpu", "--num_processes", "2", script], launched)
    assert env["DS_ACCELERATOR"] == "cpu"
    assert env["ACCEL_USE_CPU"] == "1"
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"


def test_no_visible_gpu_makes_deepspeed_use_its_cpu_accelerator(script, launched, monkeypatch):
    monkeypatch.setattr(deepspeed_launch, "visible_gpu", lambda environ: False)
    assert _launch(["--use_deepspeed", script], launched)["DS_ACCELERATOR"] == "cpu"


def test_a_ds_accelerator_the_user_set_is_left_alone(script, launched, monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    env = _launch(["--use_deepspeed", "--cpu", script], launched)
    assert "DS_ACCELERATOR" not in env  # the workers inherit the user's value
    launched.clear()
    env = _launch(["--use_deepspeed", "--cpu", "--env", "DS_ACCELERATOR=xpu", script], launched)
    assert env["DS_ACCELERATOR"] == "xpu"


def test_ds_accelerator_is_not_set_for_other_jobs(script, launched, monkeypatch):
    monkeypatch.setattr(deepspeed_launch, "visible_gpu", lambda environ: False)
    assert "DS_ACCELERATOR" not in _launch(["--cpu", "--num_processes", "2", script], launched)


def test_gpu_visibility_is_judged_on_what_the_workers_will_see(monkeypatch):
    seen = []

    def gpu_visible(environ):
        seen.append(dict(environ))
        return True

    monkeypatch.setattr(deepspeed_launch, "visible_gpu", gpu_visible)
    options = LaunchOptions(distributed_type="DEEPSPEED", gpu_ids="1", env={"FOO": "bar"})
    assert "DS_ACCELERATOR" not in worker_env(options, {"PATH": "/bin"})
    assert seen[0]["CUDA_VISIBLE_DEVICES"] == "1"
    assert seen[0]["FOO"] == "bar" and seen[0]["PATH"] == "/bin"


def test_visible_gpu_reads_device_files_and_cuda_visible_devices(tmp_path):
    assert not visible_gpu({}, dev=tmp_path)
    (tmp_path / "nvidiactl").write_text("")
    assert not visible_gpu({}, dev=tmp_path)  # the driver without a GPU
    (tmp_path / "nvidia0").write_text("")
    assert visible_gpu({}, dev=tmp_path)
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": "0"}, dev=tmp_path)
    assert not visible_gpu({"CUDA_VISIBLE_DEVICES": ""}, dev=tmp_path)
    assert not visible_gpu({"CUDA_VISIBLE_DEVICES": "-1"}, dev=tmp_path)


def test_deepspeed_env_writes_only_what_was_given():
    assert deepspeed_env(WorkerJob(2, False, {}, {}), gpu_visible=lambda e: True) == {}
    env = deepspeed_env(WorkerJob(2, True, {"gradient_clipping": 1}, {}), gpu_visible=lambda e: True)
    assert env == {"ACCEL_GRADIENT_CLIPPING": "1.0", "DS_ACCELERATOR": "cpu"}


# Config file -> worker env, and precedence -----------------------------------------------------

_ACCELERATE_DEEPSPEED_FILE = """\
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 4
  gradient_clipping: 1.0
  offload_optimizer_device: cpu
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
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
use_cpu: false
"""


def test_an_accelerate_deepspeed_file_launches_unchanged(tmp_path, script, launched):
    config = _write(tmp_path / "acc.yaml", _ACCELERATE_DEEPSPEED_FILE)
    env = _launch(["--config_file", config, script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"  # from the section
    assert _deepspeed_env(env) == {
        "ACCEL_GRADIENT_CLIPPING": "1.0",
        "ACCEL_DEEPSPEED_ZERO_STAGE": "3",
        "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
        "ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none",
        "ACCEL_DEEPSPEED_ZERO3_INIT": "true",
        "ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
    }
    assert "ACCEL_USE_CPU" not in env


def test_a_json_config_file_from_the_yaml_reaches_the_workers(tmp_path, ds_json, script, launched):
    config = _write(
        tmp_path / "c.yaml",
        f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {ds_json}\n"
        "  zero3_init_flag: false\n  deepspeed_multinode_launcher: standard\n",
    )
    env = _launch(["--config_file", config, script], launched)
    assert env["ACCEL_DEEPSPEED_CONFIG_FILE"] == str(ds_json)
    assert env["ACCEL_DEEPSPEED_ZERO3_INIT"] == "false"


def test_flags_beat_the_file(tmp_path, script, launched):
    config = _write(tmp_path / "acc.yaml", _ACCELERATE_DEEPSPEED_FILE)
    env = _launch(
        ["--config_file", config, "--zero_stage", "2", "--offload_optimizer_device", "none",
         "--gradient_clipping", "0.5", "--zero3_init_flag", "false", "--gradient_accumulation_steps", "8",
         script],
        launched,
    )  # fmt: skip
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "2"
    assert env["ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"] == "none"
    assert env["ACCEL_GRADIENT_CLIPPING"] == "0.5"
    assert env["ACCEL_DEEPSPEED_ZERO3_INIT"] == "false"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "8"
    assert env["ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE"] == "none"  # not overridden: the file's


def test_env_vars_sit_between_file_and_flags(tmp_path, script, launched, monkeypatch):
    config = _write(tmp_path / "acc.yaml", _ACCELERATE_DEEPSPEED_FILE)
    monkeypatch.setenv("ACCEL_DEEPSPEED_ZERO_STAGE", "1")
    monkeypatch.setenv("ACCEL_GRADIENT_CLIPPING", "2.5")
    env = _launch(["--config_file", config, "--gradient_clipping", "3", script], launched)
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "1"
    assert env["ACCEL_GRADIENT_CLIPPING"] == "3.0"


def test_use_deepspeed_turns_a_multi_gpu_file_into_a_deepspeed_job(tmp_path, script, launched):
    config = _write(tmp_path / "c.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\n")
    env = _launch(["--config_file", config, "--use_deepspeed", "--zero_stage", "1", script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "1"


def test_deepspeed_flags_are_accepted_when_the_file_asks_for_deepspeed(tmp_path, script, launched):
    config = _write(tmp_path / "c.yaml", "distributed_type: DEEPSPEED\n")
    assert (
        _launch(["--config_file", config, "--zero_stage", "2", script], launched)[
            "ACCEL_DEEPSPEED_ZERO_STAGE"
        ]
        == "2"
    )


@pytest.mark.parametrize("section", ["deepspeed_config: {}\n", "deepspeed_config:\n", ""])
def test_an_empty_or_absent_section_is_fine(section, tmp_path, script, launched):
    config = _write(tmp_path / "c.yaml", f"distributed_type: DEEPSPEED\n{section}")
    env = _launch(["--config_file", config, script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert _deepspeed_env(env) == {}


def test_a_section_in_a_file_without_deepspeed_is_passed_over(tmp_path, script, launched):
    config = _write(
        tmp_path / "c.yaml",
        "distributed_type: MULTI_CPU\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n"
        "  gradient_accumulation_steps: 4\n  deepspeed_multinode_launcher: pdsh\n",
    )
    env = _launch(["--config_file", config, script], launched)
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "MULTI_CPU"
    assert _deepspeed_env(env) == {}
    assert "ACCEL_GRADIENT_ACCUMULATION_STEPS" not in env


def test_config_show_lists_the_deepspeed_settings_and_their_sources(tmp_path, monkeypatch):
    config = _write(tmp_path / "acc.yaml", _ACCELERATE_DEEPSPEED_FILE)
    monkeypatch.setenv("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    result = CliRunner().invoke(accel, ["config", "show", "--config_file", config, "--zero_stage", "2"])
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0]: line for line in result.output.splitlines()}
    assert lines["zero_stage"].endswith("(flag)") and " 2 " in lines["zero_stage"]
    assert lines["offload_param_device"].endswith("(env ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE)")
    assert lines["gradient_clipping"].endswith("(file)")
    assert "deepspeed_config" not in lines  # listed key by key instead


# Refusals: one line, exit 2, nothing launched --------------------------------------------------


@pytest.mark.parametrize(
    "flag",
    [["--zero_stage", "2"], ["--deepspeed_config_file", "ds.json"], ["--offload_optimizer_device", "cpu"],
     ["--offload_param_device", "cpu"], ["--gradient_clipping", "1"], ["--zero3_init_flag", "true"],
     ["--zero3_save_16bit_model", "true"], ["--deepspeed_multinode_launcher", "standard"]],
)  # fmt: skip
def test_a_deepspeed_flag_without_deepspeed_is_refused_naming_it(flag, script, launched):
    error = _refused([*flag, script], launched)
    assert error == (
        f"Error: {flag[0]} is a DeepSpeed option: add --use_deepspeed (or set distributed_type: DEEPSPEED)"
    )


def test_a_deepspeed_flag_with_another_file_type_is_refused(tmp_path, script, launched):
    config = _write(tmp_path / "c.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n")
    error = _refused(["--config_file", config, "--zero_stage", "2", script], launched)
    assert error.startswith("Error: --zero_stage is a DeepSpeed option")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--zero_stage", "5"], "Error: --zero_stage must be one of 0, 1, 2, 3, got 5"),
        (["--zero_stage", "two"], "'--zero_stage'"),
        (["--offload_optimizer_device", "gpu"],
         "'--offload_optimizer_device' / '--offload-optimizer-device': 'gpu' is not one of 'none', 'cpu'"),
        (["--offload_param_device", "disk"],
         "'--offload_param_device' / '--offload-param-device': 'disk' is not one of"),
        (["--gradient_clipping", "-1"], "Error: --gradient_clipping must be at least 0, got -1.0"),
        (["--gradient_clipping", "nan"], "Error: --gradient_clipping must be a finite number, got nan"),
        (["--zero3_init_flag", "maybe"],
         "'--zero3_init_flag' / '--zero3-init-flag': 'maybe' is not a valid boolean"),
        (["--deepspeed_multinode_launcher", "pdsh"],
         "Error: --deepspeed_multinode_launcher is 'pdsh', but accel launches DeepSpeed jobs through torch's "
         "elastic agent on every machine: only 'standard' is accepted"),
        (["--distributed_type", "MULTI_GPU"],
         "Error: --use_deepspeed contradicts --distributed_type MULTI_GPU"),
    ],
)  # fmt: skip
def test_a_bad_deepspeed_value_is_refused_in_one_line(args, message, script, launched):
    error = _refused(["--use_deepspeed", *args, script], launched)
    assert message in error


def test_a_missing_json_file_is_refused_naming_it(tmp_path, script, launched):
    missing = tmp_path / "missing.json"
    error = _refused(["--use_deepspeed", "--deepspeed_config_file", str(missing), script], launched)
    assert error == f"Error: --deepspeed_config_file: {missing}: file not found"


def test_a_json_file_that_does_not_parse_is_refused_naming_file_and_position(tmp_path, script, launched):
    broken = _write(tmp_path / "ds.json", '{\n  "zero_optimization": {"stage": 2}\n  "fp16": {}\n}\n')
    error = _refused(["--use_deepspeed", "--deepspeed_config_file", broken, script], launched)
    position = "invalid JSON at line 3, column 3: Expecting ',' delimiter"
    assert error == f"Error: --deepspeed_config_file: {broken}: {position}"


def test_a_bad_json_file_named_in_the_yaml_is_refused_naming_the_key(tmp_path, script, launched):
    broken = _write(tmp_path / "ds.json", "[1, 2]")
    config = _write(
        tmp_path / "c.yaml",
        f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {broken}\n",
    )
    error = _refused(["--config_file", config, script], launched)
    assert error == (
        f"accel: {config}: key 'deepspeed_config.deepspeed_config_file': {broken}: "
        "must hold a JSON object, got list"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1, "a": 2}', "key 'a' is given twice"),
        ("", "invalid JSON at line 1, column 1: Expecting value"),
        ('{"a": 1}', None),
    ],
)
def test_json_config_problem(tmp_path, text, problem):
    path = _write(tmp_path / "ds.json", text)
    assert json_config_problem(path) == problem
    assert json_config_problem(str(tmp_path)) == "not a file"


def test_without_the_adapter_a_deepspeed_job_is_refused_in_one_line(script, launched, monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "accel_deepspeed" else real(name, *args)

    monkeypatch.setattr(deepspeed_launch.importlib.util, "find_spec", find_spec)
    error = _refused(["--use_deepspeed", script], launched)
    assert error == f"accel: {INSTALL_HINT}"
    assert INSTALL_HINT.endswith(
        "from the repository root: "
        "pip install -c constraints.txt ./packages/accel-state ./packages/accel-deepspeed deepspeed==0.19.8"
    )


def test_without_deepspeed_itself_a_deepspeed_job_is_refused(tmp_path, script, launched, monkeypatch):
    monkeypatch.setattr(
        deepspeed_launch.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "deepspeed" else object(),
    )
    config = _write(tmp_path / "c.yaml", "distributed_type: DEEPSPEED\n")
    assert _refused(["--config_file", config, script], launched) == f"accel: {INSTALL_HINT}"


_BAD_SECTIONS = [
    ("deepspeed_config:\n  zero_stage: 5\n",
     "key 'deepspeed_config.zero_stage' must be one of 0, 1, 2, 3, got 5"),
    ("deepspeed_config:\n  zero_stage: '2'\n",
     "key 'deepspeed_config.zero_stage' must be an integer, got '2'"),
    ("deepspeed_config:\n  offload_optimizer_device: gpu\n",
     "key 'deepspeed_config.offload_optimizer_device' must be one of none, cpu, nvme, got 'gpu'"),
    ("deepspeed_config:\n  zero_stag: 2\n",
     "key 'deepspeed_config.zero_stag' is unknown (did you mean 'deepspeed_config.zero_stage'?)"),
    ("deepspeed_config:\n  zero3_init_flag: maybe\n",
     "key 'deepspeed_config.zero3_init_flag' must be true or false"),
    ("deepspeed_config:\n  gradient_clipping: big\n",
     "key 'deepspeed_config.gradient_clipping' must be a number"),
    ("deepspeed_config:\n  gradient_accumulation_steps: 0\n",
     "key 'deepspeed_config.gradient_accumulation_steps' must be at least 1, got 0"),
    ("deepspeed_config: [1]\n", "key 'deepspeed_config' must be a mapping"),
    ("deepspeed_config:\n  deepspeed_multinode_launcher: pdsh\n",
     "key 'deepspeed_config.deepspeed_multinode_launcher' is 'pdsh', but accel launches DeepSpeed jobs "
     "through torch's elastic agent"),
    ("gradient_accumulation_steps: 2\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n",
     "key 'gradient_accumulation_steps' is 2 but key 'deepspeed_config.gradient_accumulation_steps' is 4"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), _BAD_SECTIONS)
def test_a_bad_section_is_one_line_naming_file_and_key(text, message, tmp_path, script, launched):
    config = _write(tmp_path / "c.yaml", f"distributed_type: DEEPSPEED\n{text}")
    error = _refused(["--config_file", config, script], launched)
    assert error.startswith(f"accel: {config}: "), error
    assert message in error


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("ACCEL_DEEPSPEED_ZERO_STAGE", "7", "must be one of 0, 1, 2, 3"),
        ("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "gpu", "must be one of none, cpu, nvme"),
        ("ACCEL_GRADIENT_CLIPPING", "lots", "is not a number"),
        ("ACCEL_DEEPSPEED_ZERO3_INIT", "perhaps", "is not a boolean"),
    ],
)
def test_a_bad_deepspeed_env_var_is_refused_naming_it(name, value, problem, script, launched, monkeypatch):
    monkeypatch.setenv(name, value)
    error = _refused(["--use_deepspeed", script], launched)
    assert error.startswith(f"accel: environment variable {name}")
    assert problem in error


# env_check: each new variable ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "good", "bad", "problem"),
    [
        ("ACCEL_GRADIENT_CLIPPING", "1.0", "-1", "must be a finite number of 0 or more"),
        ("ACCEL_GRADIENT_CLIPPING", "0", "inf", "must be a finite number of 0 or more"),
        ("ACCEL_DEEPSPEED_ZERO_STAGE", "3", "4", "must be one of 0, 1, 2, 3"),
        ("ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme", "gpu", "must be one of none, cpu, nvme"),
        ("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none", "disk", "must be one of none, cpu, nvme"),
        ("ACCEL_DEEPSPEED_ZERO3_INIT", "true", "maybe", "is not a boolean"),
        ("ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "0", "maybe", "is not a boolean"),
        ("ACCEL_DISTRIBUTED_TYPE", "DEEPSPEED", "MEGATRON_LM", "must be one of"),
    ],
)
def test_env_check_of_each_deepspeed_variable(name, good, bad, problem):
    env_check.check_accel_env({name: good})
    with pytest.raises(ConfigError) as info:
        env_check.check_accel_env({name: bad}, where="--env")
    assert str(info.value).startswith(f"--env {name}={bad!r} {problem}")


def test_env_check_of_the_json_config_variable(tmp_path, ds_json):
    env_check.check_accel_env({"ACCEL_DEEPSPEED_CONFIG_FILE": str(ds_json)})
    missing = str(tmp_path / "nope.json")
    with pytest.raises(ConfigError) as info:
        env_check.check_accel_env({"ACCEL_DEEPSPEED_CONFIG_FILE": missing})
    assert str(info.value) == (
        f"environment variable ACCEL_DEEPSPEED_CONFIG_FILE={missing!r} is not a usable DeepSpeed config "
        "(file not found)"
    )


def test_a_bad_deepspeed_var_given_with_env_flag_is_refused(script, launched):
    error = _refused(["--use_deepspeed", "--env", "ACCEL_DEEPSPEED_ZERO_STAGE=9", script], launched)
    assert error == "Error: --env ACCEL_DEEPSPEED_ZERO_STAGE='9' must be one of 0, 1, 2, 3"


# LaunchOptions ---------------------------------------------------------------------------------


def test_the_settings_of_a_deepspeed_job_reach_its_workers_through_the_hook():
    options = LaunchOptions(distributed_type="DEEPSPEED", engine_settings={"zero_stage": 2})
    env = worker_env(options, {})
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "DEEPSPEED"
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "2"


def test_the_settings_of_another_job_type_write_no_deepspeed_variable():
    options = LaunchOptions(distributed_type="MULTI_CPU", engine_settings={"zero_stage": 2})
    assert not [name for name in worker_env(options, {}) if "DEEPSPEED" in name]


# accel config and accel env --------------------------------------------------------------------


def test_questionnaire_writes_a_deepspeed_config(tmp_path, script, launched):
    target = tmp_path / "ds.yaml"
    # environment, type, machines, processes, JSON file (none), stage, optimizer offload, param offload,
    # zero.Init, 16-bit save, CPU only, parallelism config, torch.compile, debug, mixed precision,
    # accumulation
    answers = ["", "DEEPSPEED", "1", "2", "", "3", "cpu", "none", "y", "n", "n", "n", "n", "n", "bf16", "2"]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["distributed_type"] == "DEEPSPEED"
    assert written["deepspeed_config"] == {
        "zero_stage": 3,
        "offload_optimizer_device": "cpu",
        "offload_param_device": "none",
        "zero3_init_flag": True,
        "zero3_save_16bit_model": False,
    }
    env = _launch(["--config_file", str(target), script], launched)
    assert env["ACCEL_DEEPSPEED_ZERO_STAGE"] == "3"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "2"


def test_questionnaire_takes_a_json_file_and_two_machines(tmp_path, ds_json):
    target = tmp_path / "ds.yaml"
    answers = [
        "",
        "DEEPSPEED",
        "2",
        "0",
        "10.0.0.1",
        "",
        "static",
        "y",
        "4",
        str(ds_json),
        "n",
        "n",
        "n",  # torch.compile
        "n",
        "no",
        "1",
    ]
    result = CliRunner().invoke(
        accel, ["config", "--config_file", str(target)], input="\n".join(answers) + "\n"
    )
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(target.read_text())
    assert written["deepspeed_config"] == {
        "deepspeed_config_file": str(ds_json),
        "deepspeed_multinode_launcher": "standard",
    }
    assert written["num_machines"] == 2


def test_accel_env_reports_the_deepspeed_version(tmp_path, monkeypatch):
    real_version = env_report.importlib.metadata.version

    def version(name):
        return {"deepspeed": "0.19.8", "accel-deepspeed": "0.1.0"}.get(name) or real_version(name)

    monkeypatch.setattr(env_report.importlib.metadata, "version", version)
    result = CliRunner().invoke(
        accel, ["env", "--config_file", _write(tmp_path / "c.yaml", "debug: false\n")]
    )
    assert result.exit_code == 0, result.output
    assert "- deepspeed version: 0.19.8" in result.output.splitlines()
    assert "- accel-deepspeed version: 0.1.0" in result.output.splitlines()


def test_accel_env_says_when_deepspeed_is_missing(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        env_report.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "deepspeed" else real(name, *a),
    )
    result = CliRunner().invoke(
        accel, ["env", "--config_file", _write(tmp_path / "c.yaml", "debug: false\n")]
    )
    assert result.exit_code == 0, result.output
    assert "- deepspeed version: not installed" in result.output.splitlines()


def test_the_stand_in_knows_the_flags_and_variables_of_the_adapter():
    from accel_state.backends import adapter_stand_ins
    from accel_state.seam.launch_hook import launch_hooks

    hook = launch_hooks()["DEEPSPEED"]
    assert not hook.stand_in
    flags = {key.name for key in hook.keys if key.has_flag}
    variables = {key.env_var for key in hook.keys if key.env_var is not None}
    assert set(adapter_stand_ins.DEEPSPEED.adapter_flags) == flags
    assert set(adapter_stand_ins.DEEPSPEED.adapter_env_vars) == variables
