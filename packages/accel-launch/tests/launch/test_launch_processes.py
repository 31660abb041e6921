"""Tests that run `accel launch` for real: N gloo processes on this machine, through torch's agent."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

REPORT_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch.distributed as dist

    dist.init_process_group("gloo")
    keys = ["RANK", "WORLD_SIZE", "ACCEL_LAUNCHED", "ACCEL_USE_CPU", "OMP_NUM_THREADS",
            "ACCEL_MIXED_PRECISION", "ACCEL_GRADIENT_ACCUMULATION_STEPS", "ACCEL_DEBUG_MODE", "FOO"]
    fields = " ".join(f"{key}={os.environ.get(key)}" for key in keys)
    # One write per line: print() writes the newline separately, and the ranks share one pipe.
    sys.stdout.write(f"REPORT {fields} WORLD={dist.get_world_size()} ARGS={sys.argv[1:]}\\n")
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    """
)

CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import torch.distributed as dist

    Path(sys.argv[1], f"pid_{os.environ['RANK']}").write_text(str(os.getpid()))
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("boom-rank-1")
    if sys.argv[2] == "barrier":
        dist.barrier()
    time.sleep(60)
    """
)


def _reports(stdout: str) -> list[dict[str, str]]:
    reports = []
    for line in stdout.splitlines():
        if line.startswith("REPORT "):
            head, _, args = line.partition(" ARGS=")
            fields = dict(field.split("=", 1) for field in head.split()[1:])
            fields["ARGS"] = args
            reports.append(fields)
    return sorted(reports, key=lambda report: report["RANK"])


def _accel(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "accel_launch.commands.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def report_script(tmp_path):
    path = tmp_path / "report.py"
    path.write_text(REPORT_SCRIPT)
    return path


def test_launch_two_gloo_processes_each_rank_reports(report_script):
    result = _accel("launch", "--num_processes", "2", str(report_script), "--lr", "0.1", "-x")
    assert result.returncode == 0, result.stderr
    reports = _reports(result.stdout)
    assert [report["RANK"] for report in reports] == ["0", "1"]
    for report in reports:
        assert report["WORLD_SIZE"] == "2"
        assert report["WORLD"] == "2"
        assert report["ACCEL_LAUNCHED"] == "1"
        assert report["OMP_NUM_THREADS"] == "1"
        assert report["ARGS"] == "['--lr', '0.1', '-x']"
    assert "OMP_NUM_THREADS" not in result.stderr  # no torchrun banner


def test_launch_cpu_two_processes_passes_options_as_env(report_script):
    result = launch_script(
        report_script,
        2,
        launch_args=["--mixed-precision", "bf16", "--gradient_accumulation_steps", "4", "--debug",
                     "--env", "FOO=bar"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    reports = _reports(result.stdout)
    assert len(reports) == 2
    for report in reports:
        assert report["ACCEL_USE_CPU"] == "1"
        assert report["ACCEL_MIXED_PRECISION"] == "bf16"
        assert report["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
        assert report["ACCEL_DEBUG_MODE"] == "1"
        assert report["FOO"] == "bar"


def test_launch_without_flags_runs_one_process(report_script):
    result = _accel("launch", str(report_script))
    assert result.returncode == 0, result.stderr
    reports = _reports(result.stdout)
    assert len(reports) == 1
    assert (reports[0]["RANK"], reports[0]["WORLD_SIZE"]) == ("0", "1")


def test_launch_two_processes_exits_zero_every_time(report_script):
    for _ in range(3):
        result = launch_script(report_script, 2)
        assert result.returncode == 0, result.stderr
        assert len(_reports(result.stdout)) == 2


def test_launch_module_with_two_processes(tmp_path):
    module_source = "import os, sys\nsys.stdout.write('MODULE ' + os.environ['RANK'] + '\\n')\n"
    (tmp_path / "my_train_mod.py").write_text(module_source)
    result = launch_script("my_train_mod", 2, launch_args=["-m"], env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("MODULE")) == [
        "MODULE 0",
        "MODULE 1",
    ]


@pytest.mark.parametrize("rank0_waits_in", ["sleep", "barrier"])
def test_launch_rank_that_raises_ends_the_job_quickly(tmp_path, rank0_waits_in, running_pids):
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT)
    start = time.monotonic()
    result = launch_script(script, 2, [tmp_path, rank0_waits_in], timeout=60)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert elapsed < 15, f"the job took {elapsed:.1f} s to end"
    assert "boom-rank-1" in result.stderr
    verdicts = [line for line in result.stderr.splitlines() if line.startswith("accel launch: ")]
    assert len(verdicts) == 1, result.stderr
    assert "rank 1" in verdicts[0]
    assert "exit code 1" in verdicts[0]
    assert "Traceback" not in result.stderr.split("boom-rank-1")[-1].split("accel launch: ")[-1]
    assert len(list(tmp_path.glob("pid_*"))) == 2
    assert running_pids(tmp_path) == [], "a worker outlived the job"


def test_launch_returns_the_failing_ranks_exit_code(tmp_path):
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    result = launch_script(script, 1)
    assert result.returncode == 3
    assert "accel launch: rank 0 failed with exit code 3" in result.stderr


ATTEMPTS_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
    with open(Path(sys.argv[1], f"attempts_{os.environ['RANK']}"), "a") as handle:
        handle.write(attempt + "\\n")
    if os.environ["RANK"] == "1":
        # Fail only once rank 0 has recorded this attempt: the agent stops it as soon as rank 1 fails.
        other, deadline = Path(sys.argv[1], "attempts_0"), time.monotonic() + 30
        while time.monotonic() < deadline and not (other.exists() and attempt in other.read_text().split()):
            time.sleep(0.05)
        raise SystemExit(7)
    """
)


@pytest.mark.parametrize(("max_restarts", "attempts"), [(0, 1), (1, 2)])
def test_launch_crashing_rank_restarts_the_group_max_restarts_times(tmp_path, max_restarts, attempts):
    script = tmp_path / "attempts.py"
    script.write_text(ATTEMPTS_SCRIPT)
    result = launch_script(
        script, 2, [tmp_path], launch_args=["--max_restarts", str(max_restarts)], timeout=60
    )
    assert result.returncode == 7, result.stderr
    assert "rank 1 failed with exit code 7" in result.stderr
    for rank in (0, 1):
        lines = (tmp_path / f"attempts_{rank}").read_text().split()
        assert lines == [str(n) for n in range(attempts)], (rank, lines)


def test_launch_from_a_config_file_with_per_rank_logs(report_script, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 2\n"
        "mixed_precision: bf16\ngradient_accumulation_steps: 3\n"
    )
    logs = tmp_path / "logs"
    result = _accel(
        "launch", "--config_file", str(config), "--log_dir", str(logs), "--tee", "3", str(report_script)
    )
    assert result.returncode == 0, result.stderr
    # With --tee the agent prefixes each console line with its rank: `[default0]:REPORT ...`.
    console = "\n".join(line.partition("]:")[2] for line in result.stdout.splitlines())
    reports = _reports(console)
    assert [report["RANK"] for report in reports] == ["0", "1"]
    for report in reports:
        assert (report["ACCEL_USE_CPU"], report["ACCEL_MIXED_PRECISION"]) == ("1", "bf16")
        assert report["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "3"
    stdout_logs = sorted(logs.rglob("stdout.log"))
    assert len(stdout_logs) == 2, sorted(logs.rglob("*"))
    assert sorted(log.read_text().count("REPORT RANK=") for log in stdout_logs) == [1, 1]
    assert len(sorted(logs.rglob("stderr.log"))) == 2
