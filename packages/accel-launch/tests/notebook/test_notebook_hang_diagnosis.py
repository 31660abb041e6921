"""notebook_launcher runs its ranks under the same supervised agent as `accel launch`: a stalled
function raises within the collective timeout, and the error names where each rank was (real
forked gloo ranks)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from accel_launch import NotebookLaunchError, notebook_launcher

COLLECTIVE_TIMEOUT = 10  # seconds; ACCEL_TIMEOUT


def stall_on_rank_one() -> None:
    """Rank 1 sleeps in the function's own code while rank 0 waits for it (module level, as a notebook
    cell would define it)."""
    import time

    from accel_state import PartialState

    state = PartialState(cpu=True)
    if state.process_index == 1:
        time.sleep(300)  # stalls
    state.wait_for_everyone()  # waits


def _line(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


@pytest.mark.slow
def test_a_stalled_notebook_function_raises_naming_each_ranks_position(monkeypatch, capfd):
    monkeypatch.setenv("ACCEL_TIMEOUT", str(COLLECTIVE_TIMEOUT))
    monkeypatch.setenv("ACCEL_DEBUG_MODE", "0")  # in debug mode the check before the barrier also waits
    monkeypatch.delenv("ACCEL_DIAGNOSIS_DIR", raising=False)
    started = time.monotonic()
    with pytest.raises(NotebookLaunchError) as caught:
        notebook_launcher(stall_on_rank_one, num_processes=2, cpu=True)
    assert time.monotonic() - started < COLLECTIVE_TIMEOUT + 30
    message = str(caught.value)
    assert message.startswith("rank 0 of 2 failed (exit code 1): "), message
    here = Path(__file__).name
    assert (
        f"rank 1 never reached wait_for_everyone #1: it is in {here}:{_line('stalls')} in "
        "stall_on_rank_one: time.sleep(300)" in message
    ), message
    assert f"rank 0 waited in wait_for_everyone #1 at {here}:{_line('waits')}" in message, message
    printed = capfd.readouterr().err
    assert "notebook_launcher: diagnosis (rank 0 failed with exit code 1)" in printed, printed[-3000:]
    written = printed.split("notebook_launcher: the diagnosis, with every thread's stack, is in ")[1]
    written_path = Path(written.splitlines()[0].strip())
    assert written_path.name == "diagnosis.json" and written_path.exists()
    shutil.rmtree(written_path.parent)  # the job's diagnosis folder, kept because it holds the diagnosis
