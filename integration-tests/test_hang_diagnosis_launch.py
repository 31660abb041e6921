"""A hang names itself: real `accel launch --cpu` jobs (gloo) that stall, and the one diagnosis the
launcher prints before it tears them down, naming every rank's file:line and collective.

One job per case (a stalled job ends at its first stall); short timeouts keep each under a minute.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

COLLECTIVE_TIMEOUT = 10  # seconds; ACCEL_TIMEOUT, read by the ranks' process group
# Debug mode off unless a case asks for it: the suite's sessions turn it on for every test, and in
# debug mode ranks in different collectives raise at once instead of stalling.
ENV = {"ACCEL_TIMEOUT": str(COLLECTIVE_TIMEOUT), "ACCEL_DEBUG_MODE": "0"}

# Line numbers matter: the diagnosis names them (see LINE below).
SCRIPT = """\
import os, signal, sys, threading, time, torch
import accel_state as st
from accel_state import PartialState

case = sys.argv[1]
state = PartialState()
last = state.process_index == state.num_processes - 1
st.gather(torch.ones(2))
if case == "sleep":
    if last:
        time.sleep(300)
    state.wait_for_everyone()
elif case == "different":
    if last:
        st.gather(torch.ones(3))
    else:
        state.wait_for_everyone()
elif case == "killed":
    if last:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
        st.gather(torch.ones(4))
    else:
        time.sleep(300)
elif case == "loader":
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, index):
            if last and index == 3:
                time.sleep(300)
            return torch.tensor([float(index)])
    loader = torch.utils.data.DataLoader(Slow(), batch_size=1, num_workers=1)
    for batch in loader:
        st.gather(batch)
print("NO STALL", flush=True)
"""
LINE = {
    "sleep": 11,
    "wait_for_everyone": 12,
    "gather3": 15,
    "wait_for_everyone_else": 17,
    "killed_sleep": 23,
    "loader_for": 33,
}


def _launch(tmp_path, case, processes, *, env=None, launch_args=(), timeout=COLLECTIVE_TIMEOUT + 30):
    script = tmp_path / "stall.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    result = launch_script(
        script,
        processes,
        [case],
        env={**ENV, **(env or {})},
        launch_args=["--log_dir", str(tmp_path / "logs"), *launch_args],
        timeout=timeout + 60,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0, result.stdout + result.stderr[-3000:]
    assert "NO STALL" not in result.stdout
    assert elapsed < timeout + 15, f"took {elapsed:.0f} s"  # + the launcher's own start
    return result


def _diagnosis(result):
    lines = [line for line in result.stderr.splitlines() if line.startswith("accel launch: diagnosis (")]
    assert len(lines) == 1, result.stderr[-4000:]
    return lines[0]


def _written(tmp_path):
    return json.loads((tmp_path / "logs" / "diagnosis.json").read_text())


def test_three_ranks_two_wait_while_one_sleeps_in_its_own_code(tmp_path):
    result = _launch(tmp_path, "sleep", 3)
    headline = _diagnosis(result)
    assert (
        f"rank 2 never reached wait_for_everyone #2: it is in stall.py:{LINE['sleep']} in <module>: "
        "time.sleep(300)" in headline
    ), headline
    assert f"ranks 0, 1 wait in wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone']}" in headline or (
        re.search(
            rf"ranks 0, 1 (waited|wait) in wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone']}",
            headline,
        )
    ), headline
    data = _written(tmp_path)
    assert set(data["ranks"]) == {"0", "1", "2"}
    sleeper = data["ranks"]["2"]["report"]
    assert sleeper["where"]["line"] == LINE["sleep"]
    assert sleeper["collectives"][-1]["operation"] == "gather"
    assert sleeper["collectives"][-1]["input"] == "float32[2]"
    assert any(thread["main"] for thread in sleeper["threads"])
    assert "every thread's stack, is in" in result.stderr


def test_ranks_in_different_collectives_are_both_named(tmp_path):
    result = _launch(tmp_path, "different", 2)
    headline = _diagnosis(result)
    assert "ranks called different collectives as #2" in headline, headline
    assert f"gather #2 at stall.py:{LINE['gather3']}" in headline, headline
    assert f"wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone_else']}" in headline, headline


def test_debug_mode_refuses_different_collectives_at_once_on_every_rank(tmp_path):
    result = _launch(
        tmp_path, "different", 2, env={"ACCEL_DEBUG_MODE": "1", "ACCEL_TIMEOUT": "120"}, timeout=30
    )
    both = (
        f"wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone_else']}",
        f"gather #2 at stall.py:{LINE['gather3']}",
    )
    errors = [
        line
        for line in result.stderr.splitlines()
        if "CollectiveShapeError" in line and "different collectives" in line
    ]
    assert len(errors) >= 2, result.stderr[-4000:]  # one per rank
    for error in errors:
        assert all(site in error for site in both), error


def test_a_rank_killed_mid_collective_and_the_live_rank_are_named(tmp_path):
    result = _launch(tmp_path, "killed", 2)
    headline = _diagnosis(result)
    assert "rank 1 died (killed by SIGKILL) without a report" in headline, headline
    assert (
        f"rank 0 is in no collective: it is in stall.py:{LINE['killed_sleep']} in <module>: time.sleep(300)"
        in headline
    )


def test_a_hung_loader_worker_is_found_by_the_hang_timeout(tmp_path):
    # The collective timeout is long: only the watchdog can end this job in time.
    result = _launch(
        tmp_path,
        "loader",
        2,
        env={"ACCEL_TIMEOUT": "300"},
        launch_args=["--hang_timeout", "8"],
        timeout=8 + 30,
    )
    headline = _diagnosis(result)
    assert "no rank made progress for 8 s" in headline, headline
    assert (
        f"rank 1 never reached gather #5: it is in stall.py:{LINE['loader_for']} in <module>: "
        "for batch in loader;" in headline
    ), headline
    assert "rank 0 waits in gather #5" in headline, headline
    assert "no rank made progress for 8 s (--hang_timeout); the job was stopped" in result.stderr
