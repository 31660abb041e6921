"""`bash benchmarks/gpu_check.sh --dry-run` end to end, so that the GPU check never rots between the
days a GPU is at hand: every step's code runs on the CPU with tiny sizes and lands in the JSON and
the markdown of a temporary folder (never the repository's); without --dry-run and without a CUDA
device the check stops at once, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
STEPS = ["environment", "cuda_tests", "precision", "device_backend", "sharding", "compile", "head_to_head"]


def _gpu_check(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    output = tmp_path_factory.mktemp("gpu_check")
    done = _gpu_check("--dry-run", "--output", str(output))
    assert done.returncode == 0, done.stderr[-4000:]
    return done, output


@pytest.mark.slow
def test_dry_run_records_every_step_with_a_status_and_none_fails(dry_run):
    _, output = dry_run
    record = json.loads((output / "gpu_check.json").read_text())
    assert record["dry_run"] is True and record["status"] == "passed", record["failed_steps"]
    assert [step["name"] for step in record["steps"]] == STEPS
    for step in record["steps"]:
        assert step["status"] in ("passed", "skipped"), (step["name"], step["reason"])
        assert step["seconds"] >= 0 and (step["status"] == "passed" or step["reason"]), step["name"]
        if step["name"] != "head_to_head" or step["commands"]:  # it runs nothing where Accelerate is absent
            assert step["commands"], step["name"]
    assert (output / "logs" / "precision_fp32.log").exists()


@pytest.mark.slow
def test_dry_run_compares_the_losses_of_accel_and_the_loop_by_hand_in_each_precision(dry_run):
    _, output = dry_run
    steps = {step["name"]: step for step in json.loads((output / "gpu_check.json").read_text())["steps"]}
    precision = steps["precision"]
    assert precision["status"] == "passed" and precision["numbers"]["losses_match"] is True
    assert [row["precision"] for row in precision["rows"]] == ["fp32", "bf16", "fp16"]
    for row in precision["rows"]:
        assert row["losses match"] and row["max loss difference"] <= row["tolerance"], row
        assert row["raw steps/s"] > 0 and row["accel steps/s"] > 0
    sharding = steps["sharding"]
    assert [row["mode"] for row in sharding["rows"]] == ["ddp", "fsdp2", "nd"]
    assert all(row["max loss difference to ddp"] <= 1e-3 for row in sharding["rows"]), sharding["rows"]
    device = steps["device_backend"]["numbers"]["accel"]
    assert device["device"] == "cpu" and device["process_group"] is None
    compiled = steps["compile"]
    assert [(row["contender"], row["variant"]) for row in compiled["rows"]] == [
        ("raw", "eager"), ("accel", "full"), ("accel", "regional")
    ]  # fmt: skip
    assert all(row["graphs"] >= 1 for row in compiled["rows"][1:]) and compiled["rows"][0]["graphs"] == 0
    assert set(compiled["numbers"]["ratios"]["accel"]) == {
        "full_over_regional", "full_over_raw_eager", "regional_over_raw_eager", "full_over_eager_twin",
        "regional_over_eager_twin",
    }  # fmt: skip
    assert all(row["steps/s / eager twin"] > 0 for row in compiled["rows"])


def test_the_compile_step_leaves_out_what_its_budget_cannot_hold_without_starting_it(tmp_path):
    import time

    from benchmarks.gpu_check.commands import Run
    from benchmarks.gpu_check.compile_step import RUNS, execute, report
    from benchmarks.gpu_check.record import StepResult

    result = StepResult("compile", "compile")
    answers, left_out = execute(Run(False, tmp_path, tmp_path), result, RUNS, tmp_path, time.monotonic() + 1)
    assert answers == {} and len(left_out) == len(RUNS) and left_out[0] == "raw_eager"
    assert result.commands == [] and result.status == "passed"
    report(Run(False, tmp_path, tmp_path), result, answers, left_out)
    assert result.summary == "accel: no ratio measured" and "left out" in result.notes[0]


@pytest.mark.slow
def test_dry_run_writes_the_markdown_table_and_prints_it(dry_run):
    done, output = dry_run
    markdown = (output / "gpu_check.md").read_text()
    assert markdown.startswith("# GPU check (dry run")
    assert "| step | status | seconds | result |" in markdown
    for index in range(len(STEPS)):
        assert f"\n| {index}. " in markdown
    assert "| step | status | seconds | result |" in done.stdout


@pytest.mark.slow
def test_without_dry_run_and_without_a_gpu_it_stops_at_once_in_one_line(tmp_path):
    if any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/kfd").exists():
        pytest.skip("this machine has a GPU device: the real check would run")
    done = _gpu_check("--output", str(tmp_path), timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "no CUDA device: run with --dry-run on CPU" in done.stderr and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_source_folders_get_the_entry_points_their_pyproject_declares(tmp_path):
    code = (
        "import sys; from pathlib import Path; from benchmarks.gpu_check.sources import package_metadata; "
        "print(','.join(package_metadata(Path(sys.argv[1]), force=True)))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "accel-state" in done.stdout.split(",") and "accel" in done.stdout.strip().split(",")
    [info] = tmp_path.glob("accel_state-*.dist-info")
    entry_points = (info / "entry_points.txt").read_text()
    assert "[accel.backends]" in entry_points and "[accel.launch_hooks]" in entry_points
    assert "FSDP = accel_state.backends.fsdp.backend:FsdpBackend" in entry_points
    assert "Name: accel-state" in (info / "METADATA").read_text()


def test_a_record_written_between_steps_says_it_is_incomplete_and_how_many_steps_are_left():
    from benchmarks.gpu_check import record

    done = record.StepResult("environment", "environment", summary="torch 2.13")
    header = {"date": "now", "dry_run": False, "command": "c", "seconds": 1.0,
              "machine": {"hostname": "h", "device": "d"}, "versions": {}}  # fmt: skip
    written = record.run_record(header, [done], 6)
    assert written["status"] == "incomplete" and written["pending_steps"] == 6
    assert "**incomplete** in 1 s; 6 steps not run yet" in record.markdown(written)
    assert record.run_record(header, [done])["status"] == "passed"


def test_the_precision_figure_refuses_jobs_that_would_not_fit_on_the_device_at_once(monkeypatch):
    from benchmarks import probe
    from benchmarks.figures import precision

    monkeypatch.setattr(probe, "free_cuda_bytes", lambda: 79 * 2**30)  # an 80 GB device
    assert precision.too_big(9, 2048, 8192) is None
    refused = precision.too_big(9, 4096, 8192)
    assert (
        refused is not None and "9 jobs of width 4096 x 8192 tokens" in refused and "79.0 GiB free" in refused
    )
    monkeypatch.setattr(probe, "free_cuda_bytes", lambda: None)  # unreadable: the jobs tell
    assert precision.too_big(9, 4096, 8192) is None


@pytest.mark.slow
def test_only_runs_the_environment_and_the_steps_named_and_refuses_an_unknown_one(tmp_path):
    done = _gpu_check("--dry-run", "--only", "device_backend", "--output", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [step["name"] for step in record["steps"]] == ["environment", "device_backend"]
    refused = _gpu_check(
        "--dry-run", "--only", "sharding,warp_drive", "--output", str(tmp_path / "x"), timeout=60
    )
    assert refused.returncode == 2 and "no step named 'warp_drive'" in refused.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("names", ["", ",", " , "])
def test_only_naming_no_step_is_refused_rather_than_running_the_environment_alone(tmp_path, names):
    refused = _gpu_check("--dry-run", "--only", names, "--output", str(tmp_path / "x"), timeout=60)
    assert refused.returncode == 2 and "--only: names no step" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_a_compile_run_still_going_at_the_deadline_is_stopped_and_named_without_failing_the_step(tmp_path):
    import time

    from benchmarks.gpu_check.commands import Run, start
    from benchmarks.gpu_check.compile_step import checked
    from benchmarks.gpu_check.record import StepResult

    run, result, answers = Run(False, tmp_path, tmp_path), StepResult("compile", "compile"), {}
    began = time.monotonic()
    process = start(run, result, [sys.executable, "-c", "import time; time.sleep(60)"])
    checked(run, result, answers, ("accel", "full", False), process, time.monotonic() + 1)
    assert time.monotonic() - began < 30 and process.returncode is not None
    assert answers == {} and result.status == "passed"
    assert result.notes == ["accel_full was stopped at the step's deadline (see logs/compile_accel_full.log)"]
    assert (tmp_path / "logs" / "compile_accel_full.log").exists()
