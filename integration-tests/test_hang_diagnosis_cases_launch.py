"""The hang diagnosis in the cases test_hang_diagnosis_launch.py leaves out, with real `accel launch
--cpu` jobs (gloo): a rank that dies of an ordinary exception, a job on two machines (two launchers
on loopback), and an FSDP2 job with a rank stalled between steps (jobs/stall_between_steps.py).

One job per case; short timeouts keep each under a minute.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel_launch.rendezvous.ports import find_free_port
from accel_launch.testing.ranks import launch_script, stop_job

pytestmark = pytest.mark.slow

COLLECTIVE_TIMEOUT = 10  # seconds; ACCEL_TIMEOUT, read by the ranks' process group
# Debug mode off: in debug mode the ranks' pre-collective check would fail at once instead of stalling.
ENV = {"ACCEL_TIMEOUT": str(COLLECTIVE_TIMEOUT), "ACCEL_DEBUG_MODE": "0"}

# Line numbers matter: the diagnosis names them (see LINE below).
SCRIPT = """\
import sys, time, torch
import accel_state as st
from accel_state import PartialState

case = sys.argv[1]
state = PartialState()
st.gather(torch.ones(2))
if case == "raises":
    if state.process_index == 1:
        raise ValueError("batch 7 has no labels")
    state.wait_for_everyone()
elif case == "machines":
    if state.process_index == 1:
        time.sleep(COLLECTIVE_TIMEOUT + 12)
    state.wait_for_everyone()
print("NO STALL", flush=True)
""".replace("COLLECTIVE_TIMEOUT", str(COLLECTIVE_TIMEOUT))
LINE = {"raise": 10, "raises_wait": 11, "sleep": 14, "machines_wait": 15}


def _diagnosis(stderr, prefix="accel launch"):
    lines = [line for line in stderr.splitlines() if line.startswith(f"{prefix}: diagnosis (")]
    assert len(lines) == 1, stderr[-4000:]
    return lines[0]


def _launch(tmp_path, script_text, case_args, *, env=None, launch_args=(), timeout=COLLECTIVE_TIMEOUT + 30):
    if isinstance(script_text, Path):  # a job of integration-tests/jobs, run where it is
        script = script_text
    else:
        script = tmp_path / "stall.py"
        script.write_text(script_text)
    started = time.monotonic()
    result = launch_script(
        script,
        2,
        case_args,
        env={**ENV, **(env or {})},
        launch_args=["--log_dir", str(tmp_path / "logs"), *launch_args],
        timeout=timeout + 60,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0, result.stdout + result.stderr[-3000:]
    assert "NO STALL" not in result.stdout
    assert elapsed < timeout + 15, f"took {elapsed:.0f} s"  # + the launcher's own start
    return result


def test_a_rank_that_raises_is_named_with_its_line_and_exception(tmp_path):
    result = _launch(tmp_path, SCRIPT, ["raises"])
    headline = _diagnosis(result.stderr)
    # Rank 0's wait fails as soon as rank 1's connections close: either may be seen failing first.
    assert re.search(r"\(rank [01] failed with exit code 1", headline), headline
    assert re.search(
        r"rank 1( \(exited with code 1\))? never reached wait_for_everyone #2: it raised ValueError: "
        rf"batch 7 has no labels at stall.py:{LINE['raise']} in <module>: raise ValueError",
        headline,
    ), headline
    assert f"wait_for_everyone #2 at stall.py:{LINE['raises_wait']}" in headline, headline
    data = json.loads((tmp_path / "logs" / "diagnosis.json").read_text())
    raiser = data["ranks"]["1"]["report"]
    assert raiser["error"] == "ValueError: batch 7 has no labels"
    assert raiser["where"]["line"] == LINE["raise"]
    assert raiser["collectives"][-1]["operation"] == "gather"
    main = next(thread for thread in raiser["threads"] if thread["main"])
    assert main["frames"][-1]["line"] == LINE["raise"]  # the traceback, not the hook's own frame
    assert data["ranks"]["0"]["report"]["current"]["operation"] == "wait_for_everyone"
    # The rank's own traceback is still printed (the hook chains to Python's).
    assert "ValueError: batch 7 has no labels" in result.stderr.split("accel launch: diagnosis")[0]


def _machine_command(rank, port, script, log_dir):
    return [
        sys.executable, "-m", "accel_launch.commands.cli", "launch", "--cpu",
        "--num_machines", "2", "--machine_rank", str(rank), "--num_processes", "1",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
        "--log_dir", str(log_dir), str(script), "machines",
    ]  # fmt: skip


def test_two_machines_on_loopback_each_launcher_names_every_rank(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(SCRIPT)
    port = find_free_port()
    started = time.monotonic()
    launchers = [
        subprocess.Popen(
            _machine_command(rank, port, script, tmp_path / f"logs{rank}"),
            env={**os.environ, **ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    # Machine 1's rank sleeps 22 s on purpose (still asleep when machine 0's times out at 10 s); its
    # launcher ends after it wakes: 30 s more covers two interpreters' start and end on a busy machine.
    deadline = started + COLLECTIVE_TIMEOUT + 12 + 30
    try:
        for launcher in launchers:
            stdout, stderr = launcher.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append((launcher.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        for launcher in launchers:
            stop_job(launcher)
        pytest.fail(f"the two-machine job did not end in time; outputs so far: {outputs}")
    for code, stdout, stderr in outputs:
        assert code != 0, stderr[-3000:]
        assert "NO STALL" not in stdout
    # Machine 0's rank timed out in wait_for_everyone; machine 1's launcher asked its rank, asleep.
    headline = _diagnosis(outputs[0][2])
    assert "rank 0 failed with exit code 1" in headline, headline
    assert (
        f"rank 1 never reached wait_for_everyone #2: it is in stall.py:{LINE['sleep']} in <module>: "
        "time.sleep(" in headline
    ), headline
    assert f"rank 0 waited in wait_for_everyone #2 at stall.py:{LINE['machines_wait']}" in headline, headline
    # Machine 1's launcher prints the same diagnosis of the whole job.
    other = _diagnosis(outputs[1][2])
    assert "rank 0 failed with exit code 1, on another machine" in other, other
    assert f"stall.py:{LINE['sleep']}" in other and f"stall.py:{LINE['machines_wait']}" in other, other
    data = json.loads((tmp_path / "logs0" / "diagnosis.json").read_text())
    assert set(data["ranks"]) == {"0", "1"}


def test_fsdp2_job_with_a_rank_stalled_between_steps_names_both_ranks(tmp_path, stall_between_steps):
    # rank 1 stalls between two steps; rank 0 goes on into the next forward, whose parameter
    # all-gather (torch's, not one of accel's collectives) times out.
    job, line = stall_between_steps
    result = _launch(tmp_path, job, ["fsdp"], env={"ACCEL_DISTRIBUTED_TYPE": "FSDP"})
    headline = _diagnosis(result.stderr)
    assert (
        f"rank 1 is in no collective: it is in {job.name}:{line['stall']} in <module>: time.sleep(300)"
        in headline
    ), headline
    assert "rank 0 (exited with code 1) is in no collective: it raised RuntimeError: " in headline, headline
    assert "Timed out" in headline, headline  # torch's own error for the all-gather
    # The all-gather of FSDP2's forward is torch's, not one of accel's: named from the stack.
    assert re.search(
        rf"at {job.name}:{line['forward']} in <module>: loss = model\(torch.ones\(2, 4\)\).sum\(\) "
        r"\(inside torch.distributed's all_gather\w*\)",
        headline,
    ), headline
    data = json.loads((tmp_path / "logs" / "diagnosis.json").read_text())
    assert set(data["ranks"]) == {"0", "1"}
    assert data["ranks"]["0"]["report"]["where"]["line"] == line["forward"]
