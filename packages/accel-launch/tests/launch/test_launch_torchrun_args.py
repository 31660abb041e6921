"""Unit tests of what `accel launch` would hand to torch.distributed.run (nothing is started)."""

from __future__ import annotations

import sys

import pytest

from accel_launch.launch.options import LaunchOptions
from accel_launch.launch.torchrun_args import WORKER_EXEC, build_torchrun_call, torchrun_argv, worker_env


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _fixed_port() -> int:
    return 41234


# Workers start through _worker_exec.py (the parent-death signal) on Linux only.
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def test_single_machine_uses_the_loopback_rendezvous_and_a_free_port():
    argv = torchrun_argv(LaunchOptions(num_processes=3), "train.py", free_port=_fixed_port)
    assert _value(argv, "--nnodes") == "1"
    assert _value(argv, "--nproc_per_node") == "3"
    assert _value(argv, "--rdzv_backend") == "accel-loopback"
    assert _value(argv, "--rdzv_endpoint") == "127.0.0.1:41234"
    assert argv[-1] == "train.py"


@pytest.mark.parametrize("rdzv_backend", ["static", "c10d"])
def test_single_machine_stays_on_loopback_whatever_the_rendezvous_and_ip(rdzv_backend):
    options = LaunchOptions(rdzv_backend=rdzv_backend, main_process_ip="10.0.0.5")
    argv = torchrun_argv(options, "train.py", free_port=_fixed_port)
    assert _value(argv, "--rdzv_backend") == "accel-loopback"
    assert _value(argv, "--rdzv_endpoint") == "127.0.0.1:41234"
    ipv6 = torchrun_argv(LaunchOptions(main_process_ip="::1"), "train.py", free_port=_fixed_port)
    assert _value(ipv6, "--rdzv_endpoint") == "[::1]:41234"


def test_explicit_port_is_used_instead_of_a_free_one():
    def no_port() -> int:
        raise AssertionError("a free port was looked up although one was given")

    argv = torchrun_argv(LaunchOptions(main_process_port=29555), "train.py", free_port=no_port)
    assert _value(argv, "--rdzv_endpoint") == "127.0.0.1:29555"


def test_defaults_restart_nothing_and_watch_workers_often():
    argv = torchrun_argv(LaunchOptions(), "train.py", free_port=_fixed_port)
    assert _value(argv, "--max_restarts") == "0"
    assert float(_value(argv, "--monitor_interval")) == pytest.approx(0.1)


def test_multi_machine_points_every_machine_at_machine_zero():
    options = LaunchOptions(
        num_processes=4, num_machines=2, machine_rank=1, main_process_ip="10.0.0.5", main_process_port=6000
    )
    argv = torchrun_argv(options, "train.py")
    assert _value(argv, "--nnodes") == "2"
    assert _value(argv, "--nproc_per_node") == "4"
    assert _value(argv, "--node_rank") == "1"
    assert _value(argv, "--master_addr") == "10.0.0.5"
    assert _value(argv, "--master_port") == "6000"


def test_multi_machine_without_port_uses_a_fixed_port_all_machines_can_agree_on():
    def no_port() -> int:
        raise AssertionError("a free port of this machine means nothing to the others")

    options = LaunchOptions(num_machines=2, main_process_ip="10.0.0.5")
    assert _value(torchrun_argv(options, "train.py", free_port=no_port), "--master_port") == "29500"


@linux_only
def test_module_flag_is_passed_before_the_module_name():
    argv = torchrun_argv(LaunchOptions(module=True), "pkg.train", ["--lr", "1"], free_port=_fixed_port)
    assert argv[-4:] == ["-m", "pkg.train", "--lr", "1"]


@linux_only
def test_workers_start_through_the_exec_wrapper_that_ties_them_to_the_launcher():
    argv = torchrun_argv(LaunchOptions(), "train.py", ["a"], free_port=_fixed_port, launcher_pid=4321)
    assert argv[-4:] == [str(WORKER_EXEC), "4321", "train.py", "a"]
    assert WORKER_EXEC.is_file()


def test_script_args_follow_the_script_untouched():
    script_args = ["--num_processes", "7", "-m", "--", "x y"]
    argv = torchrun_argv(LaunchOptions(), "train.py", script_args, free_port=_fixed_port)
    assert argv[-6:] == ["train.py", *script_args]
    assert "--module" not in argv


@linux_only
def test_argv_is_accepted_by_torchruns_own_parser():
    from torch.distributed.run import get_args_parser

    options = LaunchOptions(num_processes=2, module=True)
    argv = torchrun_argv(options, "m", ["--x", "1"], free_port=_fixed_port, launcher_pid=7)
    args = get_args_parser().parse_args(argv)
    assert args.nproc_per_node == "2"
    assert args.rdzv_endpoint == "127.0.0.1:41234"
    assert args.module is False
    assert args.training_script == str(WORKER_EXEC)
    assert args.training_script_args == ["7", "-m", "m", "--x", "1"]


def test_worker_env_always_marks_the_launch():
    assert worker_env(LaunchOptions(), environ={})["ACCEL_LAUNCHED"] == "1"


def test_single_machine_workers_listen_on_the_loopback_interface(monkeypatch):
    from accel_launch.launch import torchrun_args

    monkeypatch.setattr(torchrun_args, "loopback_interface", lambda: "lo")
    env = worker_env(LaunchOptions(num_processes=2), environ={})
    assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("lo", "lo")
    assert "GLOO_SOCKET_IFNAME" not in worker_env(LaunchOptions(), environ={"GLOO_SOCKET_IFNAME": "eth1"})
    several = LaunchOptions(num_machines=2, main_process_ip="10.0.0.5")
    assert "GLOO_SOCKET_IFNAME" not in worker_env(several, environ={})


def test_worker_env_carries_the_options():
    options = LaunchOptions(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=4, debug=True)
    env = worker_env(options, environ={})
    assert env["ACCEL_USE_CPU"] == "1"
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
    assert env["ACCEL_DEBUG_MODE"] == "1"


def test_omp_threads_set_for_several_processes_unless_the_user_chose():
    assert worker_env(LaunchOptions(num_processes=2), environ={})["OMP_NUM_THREADS"] == "1"
    user_chose = {"OMP_NUM_THREADS": "8"}
    assert "OMP_NUM_THREADS" not in worker_env(LaunchOptions(num_processes=2), environ=user_chose)
    assert "OMP_NUM_THREADS" not in worker_env(LaunchOptions(num_processes=1), environ={})


def test_user_env_is_added_last_and_wins():
    options = LaunchOptions(num_processes=2, env={"FOO": "bar", "OMP_NUM_THREADS": "2"})
    env = worker_env(options, environ={})
    assert env["FOO"] == "bar"
    assert env["OMP_NUM_THREADS"] == "2"


def test_build_torchrun_call_bundles_argv_and_env():
    call = build_torchrun_call(LaunchOptions(cpu=True), "t.py", ["a"], free_port=_fixed_port, environ={})
    assert call.argv[-2:] == ["t.py", "a"]
    assert call.env["ACCEL_USE_CPU"] == "1"
