"""`accel launch --xla`/`--tpu` and `distributed_type: XLA`: the worker command and env an XLA job
gets (the runner replaced, no torch_xla needed), every refusal in one line, the worker program's
own pieces, and notebook_launcher's XLA path through a fake replica start.

XLA's launch hook ships with accel-xla (torch-free, torch_xla-free): these tests need the adapter
installed (the xla session); without it, test_launch_hooks checks the stand-in."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.launch.options import LaunchOptions
from accel_launch.launch.torchrun_args import build_replica_call
from accel_state.seam.launch_hook import launch_hooks

xla_launch = pytest.importorskip("accel_xla.launch.hook")

XLA_VARS = ("PJRT_DEVICE", "CPU_NUM_DEVICES")


@pytest.fixture(autouse=True)
def _no_xla_vars(monkeypatch):
    for name in XLA_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(xla_launch, "tpu_present", lambda: False)


@pytest.fixture
def xla_installed(monkeypatch):
    """Pretend accel-xla and torch_xla are installed (the launcher only asks importlib)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in xla_launch.REQUIRED_MODULES:
            return SimpleNamespace(name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(xla_launch.importlib.util, "find_spec", find_spec)


@pytest.fixture
def xla_launched(monkeypatch):
    """Record what the XLA runner would start instead of starting it."""
    from accel_launch.launch import runner

    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(argv, env, *, debug=False, job="job"):
        assert job == "XLA job"
        calls.append((list(argv), dict(env)))
        return 0

    monkeypatch.setattr(runner, "run_program", fake_run)
    return calls


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _launch(args: list[str], calls) -> tuple[list[str], dict[str, str]]:
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    return calls[0]


def _refused(args: list[str], calls) -> str:
    result = CliRunner().invoke(accel, ["launch", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error:", "accel:"))]
    assert len(lines) == 1, result.output
    assert calls == []
    return lines[0]


@pytest.mark.parametrize("flag", ["--xla", "--tpu"])
def test_xla_flag_runs_the_worker_with_the_replica_count_and_the_xla_env(
    flag, script, xla_installed, xla_launched, launched, monkeypatch
):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")  # the script staggers its replicas (see below)
    argv, env = _launch([flag, "--num_processes", "2", script, "--lr", "0.1"], xla_launched)
    assert argv[:4] == [sys.executable, "-u", "-m", "accel_launch.launch._replica_worker"]
    assert argv[4] == str(os.getpid())
    assert argv[5:] == ["2", script, "--lr", "0.1"]
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "XLA"
    assert env["PJRT_DEVICE"] == "CPU"
    assert env["CPU_NUM_DEVICES"] == "2"
    assert env["ACCEL_LAUNCHED"] == "1"
    assert launched == []  # not torch's elastic agent


def test_distributed_type_xla_in_the_config_file_is_an_xla_job(
    tmp_path, script, xla_installed, xla_launched, launched
):
    config = tmp_path / "config.yaml"
    config.write_text("distributed_type: XLA\nnum_processes: 1\nmixed_precision: bf16\n")
    argv, env = _launch(["--config_file", str(config), script], xla_launched)
    assert argv[5:] == ["1", script]
    assert env["ACCEL_DISTRIBUTED_TYPE"] == "XLA"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert (env["PJRT_DEVICE"], env["CPU_NUM_DEVICES"]) == ("CPU", "1")  # no TPU here: XLA's CPU device
    assert launched == []


def test_a_module_and_env_pairs_reach_the_xla_worker(xla_installed, xla_launched):
    argv, env = _launch(["--xla", "--env", "CPU_NUM_DEVICES=3", "-m", "pkg.train", "x"], xla_launched)
    assert argv[5:] == ["1", "-m", "pkg.train", "x"]
    assert env["CPU_NUM_DEVICES"] == "3"  # --env has the last word


def test_pjrt_device_is_the_users_else_tpu_on_a_tpu_machine_else_cpu():
    assert xla_launch.xla_env(4, {}, tpu=lambda: True) == {
        "ACCEL_DISTRIBUTED_TYPE": "XLA",
        "PJRT_DEVICE": "TPU",
    }
    assert xla_launch.xla_env(2, {}, tpu=lambda: False) == {
        "ACCEL_DISTRIBUTED_TYPE": "XLA",
        "PJRT_DEVICE": "CPU",
        "CPU_NUM_DEVICES": "2",
    }
    kept = xla_launch.xla_env(2, {"PJRT_DEVICE": "CUDA"}, tpu=lambda: True)
    assert kept == {"ACCEL_DISTRIBUTED_TYPE": "XLA", "PJRT_DEVICE": "CUDA"}


def test_a_missing_torch_xla_is_one_line_naming_the_extra(script, xla_launched, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        xla_launch.importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name == "torch_xla" else real(name, *a, **k),
    )
    line = _refused(["--xla", script], xla_launched)
    assert line == f"accel: {xla_launch.INSTALL_HINT}"
    assert "from the repository root: pip install --index-url https://download.pytorch.org/whl/cpu" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--xla", "--distributed_type", "MULTI_CPU"], "--xla contradicts --distributed_type MULTI_CPU"),
        (["--xla", "--num_machines", "2", "--main_process_ip", "10.0.0.1"], "runs XLA jobs on one machine"),
        (["--xla", "--max_restarts", "1"], "--max_restarts is not supported for XLA jobs"),
        (["--xla", "--tee", "3", "--log_dir", "logs"], "--log_dir is not supported for XLA jobs"),
    ],
)
def test_what_an_xla_job_cannot_honour_is_refused_in_one_line(
    args, message, script, xla_installed, xla_launched, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert message in _refused([*args, script], xla_launched)


def test_xla_flag_builds_the_call_without_the_cli():
    options = LaunchOptions(num_processes=2, distributed_type="XLA", mixed_precision="bf16")
    call = build_replica_call(options, "t.py", ["a"], environ={"PJRT_DEVICE": "CPU"}, launcher_pid=7)
    assert call.argv[4:] == ["7", "2", "t.py", "a"]
    assert call.env["CPU_NUM_DEVICES"] == "2"
    assert call.env["ACCEL_MIXED_PRECISION"] == "bf16"


# notebook_launcher under XLA ----------------------------------------------------------------------


class FakeXlaBackend:
    """Records how notebook_launcher asks the XLA hook to start replicas, and the env it saw."""

    calls: list[dict] = []

    @classmethod
    def launch(cls, function, args=(), *, num_processes=1, start_method="spawn"):
        seen = {name: os.environ.get(name) for name in ("ACCEL_DISTRIBUTED_TYPE", *XLA_VARS)}
        cls.calls.append({"num_processes": num_processes, "start_method": start_method, "env": seen})
        return [function(*args) for _ in range(num_processes)]


@pytest.fixture
def fake_xla_backend(monkeypatch):
    FakeXlaBackend.calls = []
    hooks = launch_hooks()
    monkeypatch.setitem(hooks, "XLA", hooks["XLA"]._replace(start_replicas=FakeXlaBackend.launch))
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "XLA")  # as an XLA device would make it
    return FakeXlaBackend


def test_notebook_launcher_under_xla_runs_through_the_backends_launch(fake_xla_backend, monkeypatch):
    from accel_launch import notebook_launcher

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert notebook_launcher(lambda x: x + 1, (1,), num_processes=2) == [2, 2]
    (call,) = fake_xla_backend.calls
    assert call == {
        "num_processes": 2,
        "start_method": "fork",  # a notebook's functions cannot be imported by spawned children
        "env": {"ACCEL_DISTRIBUTED_TYPE": "XLA", "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"},
    }
    assert "CPU_NUM_DEVICES" not in os.environ  # restored after the launch


def test_notebook_launcher_with_cpu_true_is_not_an_xla_run(fake_xla_backend, monkeypatch):
    from accel_launch import notebook_launcher

    monkeypatch.delenv("ACCEL_DISTRIBUTED_TYPE")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert notebook_launcher(os.getpid, num_processes=1, cpu=True) == [os.getpid()]
    assert fake_xla_backend.calls == []


# Several replicas on XLA's CPU device ------------------------------------------------------------


@pytest.mark.parametrize("pjrt", ["CPU", None])  # None: no TPU here, so XLA's CPU device
def test_two_replicas_on_the_cpu_device_are_refused_up_front_with_the_reason(
    pjrt, script, xla_installed, xla_launched, launched, monkeypatch
):
    if pjrt is not None:
        monkeypatch.setenv("PJRT_DEVICE", pjrt)
    line = _refused(["--xla", "--num_processes", "2", script], xla_launched)
    assert line.startswith(
        "Error: --num_processes 2 cannot run on XLA's CPU device: its replicas are threads"
    )
    assert "rendezvous times out" in line and "pytorch/xla#9089" in line
    assert "accel launch --xla without --num_processes" in line and "CPU_NUM_DEVICES=2" in line
    assert launched == []


def test_replicas_from_the_config_file_on_the_cpu_device_are_refused_too(
    tmp_path, script, xla_installed, xla_launched
):
    config = tmp_path / "config.yaml"
    config.write_text("distributed_type: XLA\nnum_processes: 2\n")
    line = _refused(["--config_file", str(config), script], xla_launched)
    assert "cannot run on XLA's CPU device" in line


def test_cpu_num_devices_set_to_another_count_is_refused_naming_both(
    script, xla_installed, xla_launched, monkeypatch
):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    line = _refused(["--xla", "--num_processes", "2", script], xla_launched)
    assert line == (
        "Error: --num_processes is 2 but CPU_NUM_DEVICES is 4: on XLA's CPU device they are the same "
        "replica count; set one of them"
    )


def test_one_replica_on_the_cpu_device_and_several_on_a_tpu_still_run(
    script, xla_installed, xla_launched, monkeypatch
):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    argv, _ = _launch(["--xla", script], xla_launched)
    assert argv[5:] == ["1", script]
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    xla_launched.clear()
    argv, env = _launch(["--xla", "--num_processes", "4", script], xla_launched)
    assert argv[5:] == ["4", script] and "CPU_NUM_DEVICES" not in env
