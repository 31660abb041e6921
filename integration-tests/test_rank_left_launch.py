"""A rank that leaves the job (returns, sys.exit, or an uncaught exception) while the others call a
collective: on 2 real gloo ranks via `accel launch`, the others get RankLeftError naming the rank
that left, how, and the operation, not gloo's "Connection closed by peer"."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

# A short timeout: a rank left waiting fails the test in a minute, not in half an hour.
ENV = {"ACCEL_TIMEOUT": "60"}
GLOO_LOST_PEER = ("Connection closed by peer", "Connection reset by peer")

SCRIPT = """\
import sys, time, torch
import accel_state as st
from accel_state import PartialState, RankLeftError

case = sys.argv[1]
state = PartialState()
leaver = 0 if case == "rank_0_exits" else 1
if state.process_index == leaver:
    if case == "rank_1_raises":
        raise ValueError("stopped on purpose")
    sys.exit(0)
if case == "rank_1_exits_long_before":
    time.sleep(3)  # rank 1 is gone before this rank reaches the gather
try:
    st.barrier() if case == "barrier" else st.gather(torch.ones(2))
except RankLeftError as error:
    print(f"RANK_LEFT_ERROR {error}", flush=True)
    sys.exit(3)
print("NO ERROR", flush=True)
"""

CASES = {
    "rank_1_exits": "gather: rank 1 left the job (it exited) before joining this gather",
    "rank_1_exits_long_before": "gather: rank 1 left the job (it exited) before joining this gather",
    "rank_1_raises": (
        "gather: rank 1 left the job (it stopped on an uncaught ValueError: stopped on purpose) before "
        "joining this gather"
    ),
    "rank_0_exits": "gather: rank 0 left the job (it exited) before joining this gather",
    "barrier": "barrier: rank 1 left the job (it exited) before joining this barrier",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_ranks_still_in_a_collective_are_told_who_left(tmp_path, case):
    script = tmp_path / "leave.py"
    script.write_text(SCRIPT)
    result = launch_script(script, 2, [case], env=ENV, timeout=180)
    assert result.returncode != 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("RANK_LEFT_ERROR ")]
    assert len(lines) == 1, result.stdout + result.stderr[-3000:]
    assert CASES[case] in lines[0]
    # gloo's own error stays quoted. Its wording depends on how the leaver's sockets went: closed
    # ("Connection closed by peer") or reset with data unread ("Read error ...: Connection reset by peer").
    quoted = lines[0].partition("Original error: ")[2]
    assert any(mark in quoted for mark in GLOO_LOST_PEER), lines[0]
