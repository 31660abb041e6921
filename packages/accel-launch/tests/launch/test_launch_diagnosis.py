"""The diagnosis text, from made-up reports: who stalls the job, who waits, and where."""

from __future__ import annotations

from accel_launch.launch.diagnosis import diagnose


def _entry(operation, sequence, line, file="/job/train.py"):
    return {"operation": operation, "sequence": sequence, "file": file, "line": line, "input": "float32[2]"}


def _report(rank, current=None, done=(), where=None, error=""):
    return {
        "rank": rank,
        "pid": 100 + rank,
        "current": current,
        "collectives": [*done, *([current] if current else [])],
        "where": where,
        "error": error,
        "threads": [],
    }


def _at(line, code, function="main"):
    return {"file": "/job/train.py", "line": line, "function": function, "code": code}


def test_the_rank_behind_is_named_first_and_the_waiting_ones_after():
    gather = _entry("gather", 1, 10)
    reports = {
        0: _report(
            0, _entry("wait_for_everyone", 2, 18), [gather], _at(18, "accelerator.wait_for_everyone()")
        ),
        1: _report(1, None, [gather], _at(20, "time.sleep(60)")),
    }
    result = diagnose(reports, {0: None, 1: None}, "rank 0 failed with exit code 1")
    assert result.lines[0] == (
        "diagnosis (rank 0 failed with exit code 1): rank 1 never reached wait_for_everyone #2: it is in "
        "train.py:20 in main: time.sleep(60); rank 0 waits in wait_for_everyone #2 at train.py:18"
    )
    assert "    last collectives: gather #1 at train.py:10" in result.lines
    assert result.data["ranks"]["1"]["report"]["where"]["line"] == 20


def test_ranks_in_different_collectives_under_one_number_lead_with_the_odd_one_out():
    reports = {
        0: _report(0, _entry("wait_for_everyone", 2, 18)),
        1: _report(1, _entry("wait_for_everyone", 2, 18)),
        2: _report(2, _entry("gather", 2, 14)),
    }
    headline = diagnose(reports, dict.fromkeys(reports), "x").data["summary"]
    assert headline == (
        "ranks called different collectives as #2: rank 2 is in gather #2 at train.py:14 while ranks 0, 1 "
        "are in wait_for_everyone #2 at train.py:18"
    )


def test_a_rank_in_an_earlier_collective_never_reached_the_later_one():
    reports = {
        0: _report(0, _entry("reduce", 5, 30), error="CollectiveTimeoutError: reduce timed out"),
        1: _report(1, _entry("gather", 4, 25)),
    }
    headline = diagnose(reports, {0: 1, 1: None}, "x").data["summary"]
    assert headline == (
        "rank 1 never reached reduce #5: it is in gather #4 at train.py:25; "
        "rank 0 waited in reduce #5 at train.py:30"
    )


def test_dead_and_silent_ranks_are_said_to_be_so():
    reports = {0: _report(0, _entry("gather", 3, 12)), 1: None, 2: None}
    headline = diagnose(reports, {0: None, 1: -9, 2: None}, "rank 1 was killed by SIGKILL").data["summary"]
    assert "rank 1 died (killed by SIGKILL) without a report: where it was is unknown" in headline
    assert "rank 2 did not answer" in headline and "(it never reached gather #3)" in headline
    assert headline.endswith("rank 0 waits in gather #3 at train.py:12")


def test_with_no_collective_in_flight_each_rank_says_where_it_is():
    reports = {0: _report(0, None, [], _at(33, "for batch in loader:")), 1: _report(1, None, [], None)}
    headline = diagnose(reports, {0: None, 1: None}, "no rank made progress for 8 s").data["summary"]
    assert headline.startswith(
        "rank 0 is in no collective: it is in train.py:33 in main: for batch in loader;"
    )
    assert "rank 1 is in no collective: it is in outside the script's code" in headline
