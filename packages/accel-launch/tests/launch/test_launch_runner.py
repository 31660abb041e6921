"""The launcher's one-line verdict names the rank that failed, not the ones the agent stopped."""

from __future__ import annotations

import signal

from accel_launch.launch.runner import _report_failures


def test_launch_verdict_skips_ranks_stopped_by_the_agent(capsys):
    code = _report_failures({0: (-signal.SIGTERM, 100), 1: (1, 100)})
    verdict = capsys.readouterr().err.strip()
    assert verdict == "accel launch: rank 1 failed with exit code 1 (see its traceback above)"
    assert code == 1


def test_launch_verdict_names_ranks_failing_in_the_same_second(capsys):
    code = _report_failures({0: (1, 100), 1: (2, 100), 2: (1, 101), 3: (-signal.SIGTERM, 101)})
    verdict = capsys.readouterr().err.strip()
    assert "rank 0 (exit code 1) and rank 1 (exit code 2) failed at the same time" in verdict
    assert "1 more rank(s) failed after that" in verdict
    assert code == 1


def test_launch_verdict_for_a_rank_killed_by_a_signal(capsys):
    code = _report_failures({0: (-signal.SIGKILL, 100)})
    assert "rank 0 was killed by SIGKILL" in capsys.readouterr().err
    assert code == 128 + signal.SIGKILL
