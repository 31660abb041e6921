"""The hang diagnosis of a DeepSpeed job, on 2 real CPU processes (gloo): one rank stalls in its own
code between two steps while the other goes on into the engine's gradient all-reduce, which times
out; the launcher's one diagnosis names both ranks' lines.

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
ENV = {
    "ACCEL_TIMEOUT": str(COLLECTIVE_TIMEOUT),
    "ACCEL_DEBUG_MODE": "0",
    "ACCEL_DISTRIBUTED_TYPE": "DEEPSPEED",
    "DS_ACCELERATOR": "cpu",
}
STARTUP = 30  # seconds DeepSpeed may take to start two CPU processes here

# Line numbers matter: the diagnosis names them (see LINE below).
SCRIPT = """\
import time, torch
from accel import Accelerator, DeepSpeedPlugin
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(3):
    if step == 1 and accelerator.process_index == 1:
        time.sleep(300)
    loss = model(torch.ones(2, 4)).sum()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
print("NO STALL", flush=True)
"""
LINE = {"sleep": 9, "backward": 11, "step": 12}


def test_a_deepspeed_rank_stalled_between_steps_and_the_waiting_rank_are_named(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    result = launch_script(
        script,
        2,
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
        f"rank 1 is in no collective: it is in stall.py:{LINE['sleep']} in <module>: time.sleep(300)"
        in headline
    ), headline
    data = json.loads((tmp_path / "logs" / "diagnosis.json").read_text())
    assert set(data["ranks"]) == {"0", "1"}
    waiting = data["ranks"]["0"]["report"]["where"]["line"]
    assert waiting in (LINE["backward"], LINE["step"]), headline  # the engine's all-reduce
    assert f"stall.py:{waiting}" in headline, headline
