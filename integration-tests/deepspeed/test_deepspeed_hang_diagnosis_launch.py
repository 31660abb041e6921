"""The hang diagnosis of a DeepSpeed job, on 2 real CPU processes (gloo): one rank stalls in its own
code between two steps while the other goes on into the engine's gradient all-reduce, which must
time out after ACCEL_TIMEOUT (the engine's data-parallel group is one DeepSpeed makes itself, with
no timeout given); the launcher's one diagnosis names both ranks' lines in the script.

Runs in the nox session `engines(backend='deepspeed')`; elsewhere it skips, saying why.
"""

from __future__ import annotations

import json
import time

import pytest

from accel_launch.testing.ranks import launch_script

pytest.importorskip(
    "deepspeed", reason="DeepSpeed is not installed: they run in the nox session engines(backend='deepspeed')"
)
pytestmark = pytest.mark.slow

COLLECTIVE_TIMEOUT = 10  # seconds; ACCEL_TIMEOUT, read by the ranks' process group
# Debug mode off: in debug mode the ranks' pre-collective check would fail at once instead of stalling.
ENV = {"ACCEL_TIMEOUT": str(COLLECTIVE_TIMEOUT), "ACCEL_DEBUG_MODE": "0", "DS_ACCELERATOR": "cpu"}
STARTUP = 30  # seconds DeepSpeed may take to start two CPU processes here


def test_a_deepspeed_rank_stalled_between_steps_and_the_waiting_rank_are_named(tmp_path, stall_between_steps):
    job, line = stall_between_steps
    started = time.monotonic()
    result = launch_script(
        job,
        2,
        ["deepspeed"],
        env=ENV,
        launch_args=["--log_dir", str(tmp_path / "logs")],
        timeout=COLLECTIVE_TIMEOUT + STARTUP + 90,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0, result.stdout + result.stderr[-3000:]
    assert "NO STALL" not in result.stdout
    assert elapsed < COLLECTIVE_TIMEOUT + STARTUP + 30, f"took {elapsed:.0f} s"
    headlines = [line for line in result.stderr.splitlines() if line.startswith("accel launch: diagnosis (")]
    assert len(headlines) == 1, result.stderr[-4000:]
    headline = headlines[0]
    assert (
        f"rank 1 is in no collective: it is in {job.name}:{line['stall']} in <module>: time.sleep(300)"
        in headline
    ), headline
    assert "Timed out" in headline, headline  # gloo's own error, after ACCEL_TIMEOUT, not 30 minutes
    data = json.loads((tmp_path / "logs" / "diagnosis.json").read_text())
    assert set(data["ranks"]) == {"0", "1"}
    waiting = data["ranks"]["0"]["report"]["where"]
    # Named by the script's line that called the engine, not by DeepSpeed's own file.
    assert (waiting["file"], waiting["line"]) in {(str(job), line["backward"]), (str(job), line["step"])}, (
        headline
    )
    assert (
        f"{job.name}:{waiting['line']}" in headline and "(inside torch.distributed's all_reduce)" in headline
    )
