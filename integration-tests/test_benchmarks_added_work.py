"""The figure "accel's own work" counts what accel adds to a step instead of timing it: accel's own
code in full, every call the hand-written step does not make at its mean own time (at most what
accel's side spent in that function beyond the hand-written side), the loop's own lines on both
sides (work moved from them into accel is not added), nothing for the calls accel saves; and a
profiled step names the same function the same way on both sides. Pure functions and one profiled
call in this process: no job is started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.added_work import added_work  # noqa: E402
from benchmarks.workers.step_work import added, least_waiting, step_work  # noqa: E402


def _step(
    functions: dict[str, list[float]], profiler_s: tuple[float, float] = (0.0, 0.0)
) -> dict[str, object]:
    """A `step_work` answer: {name: [calls, own seconds, accel's, calls it makes, the loop's]}."""
    return {"functions": {name: [*entry, 0, 0][:5] for name, entry in functions.items()}, "step_s": 1.0,
            "profiler_s": list(profiler_s)}  # fmt: skip


def test_accel_adds_its_own_code_and_the_calls_the_hand_written_step_does_not_make() -> None:
    raw = _step({"torch:1:matmul": [10, 0.5, 0], "torch:9:sampler": [4, 0.1, 0], "~:0:len": [3, 0.003, 0]})
    accel = _step(
        {
            "torch:1:matmul": [10, 0.6, 0],  # the same calls, slower here: not accel's
            "accel:loader.py:5:__iter__": [2, 0.002, 1],  # accel's code: all of it
            "~:0:len": [5, 0.010, 0],  # 2 more calls than raw: 2/5 of their time
            "torch:7:all_gather": [1, 0.004, 0],  # a call raw never makes: all of it
        }
    )
    work = added(raw, accel)
    assert work["own_calls"] == 2 and work["own_s"] == pytest.approx(0.002)
    assert work["extra_calls"] == 3 and work["extra_s"] == pytest.approx(0.004 + 0.004)
    assert work["seconds"] == pytest.approx(0.010)
    assert work["raw_calls"] == 17  # the sampler accel replaced is not credited
    assert work["largest"][0] in ("torch:7:all_gather", "~:0:len") and work["largest"][2] == pytest.approx(
        0.004
    )


def test_extra_calls_of_a_function_both_sides_call_cost_at_most_what_accels_side_spent_beyond() -> None:
    # The loop's .float() on both sides; accel's forward already cast its output, so accel's side
    # makes 64 more calls that are no-ops: 2 ms in all beyond raw, not half of 130 ms of conversions.
    raw = _step({"~:0:float": [64, 0.064, 0]})
    accel = _step({"~:0:float": [128, 0.066, 0], "~:0:numel": [4, 0.004, 0]})
    work = added(raw, accel)
    assert work["extra_calls"] == 68 and work["extra_s"] == pytest.approx(0.002 + 0.004)
    # Calls slower on accel's side than on raw's are still charged at accel's own mean time.
    slower = added(_step({"~:0:len": [3, 0.003, 0]}), _step({"~:0:len": [6, 0.012, 0]}))
    assert slower["extra_s"] == pytest.approx(0.006)


def test_what_the_profiler_adds_to_each_call_is_taken_off() -> None:
    raw = _step({"torch:1:matmul": [10, 0.5, 0]})
    accel = _step(
        {
            "torch:1:matmul": [10, 0.5, 0],
            "accel:wrap.py:3:step": [10, 0.0021, 1, 10],
            "~:0:len": [2, 0.0003, 0],
        },
        profiler_s=(0.0001, 0.00005),
    )
    work = added(raw, accel)
    # 10 calls charged 0.1 ms each to the callee and 10 calls made, 0.05 ms each to the caller
    assert work["own_s"] == pytest.approx(0.0021 - 0.001 - 0.0005)
    assert work["extra_s"] == pytest.approx(0.0003 - 0.0002)
    # never below nothing
    cheap = _step({"accel:wrap.py:3:step": [10, 0.0001, 1, 0]}, profiler_s=(0.0001, 0.0))
    assert added(_step({}), cheap)["own_s"] == 0


def test_the_same_work_adds_nothing() -> None:
    same = _step({"torch:1:matmul": [10, 0.5, 0], "script.py:step": [1, 0.01, 0]})
    work = added(same, same)
    assert work["seconds"] == 0 and work["extra_calls"] == 0 and work["largest"][0] == ""


def test_the_loops_own_lines_count_on_both_sides_so_work_moved_into_accel_is_not_added() -> None:
    # By hand the loop divides the loss and chooses no_sync in its own lines (4 ms an epoch); through
    # accel its lines take 1.5 ms and accel's backward, which divides the loss, 3 ms.
    raw = _step({"train_loop.py:run": [1, 0.004, 0, 0, 1], "train_loop.py:loss_of": [64, 0.002, 0, 0, 1]})
    accel = _step(
        {
            "train_loop.py:run": [1, 0.0015, 0, 0, 1],
            "train_loop.py:loss_of": [64, 0.002, 0, 0, 1],
            "accel:accelerator.py:358:backward": [64, 0.003, 1],
        }
    )
    work = added(raw, accel)
    assert work["own_s"] == pytest.approx(0.003) and work["loop_s"] == pytest.approx(-0.0025)
    assert work["seconds"] == pytest.approx(0.0005) and work["extra_calls"] == 0
    # More of the loop's lines through accel are charged, and the loop's functions that only one
    # side has (another name) count among its lines, not as extra calls.
    longer = _step({"train_loop.py:accel_run": [1, 0.005, 0, 0, 1], "accel:a.py:1:step": [1, 0.001, 1]})
    work = added(raw, longer)
    assert work["loop_s"] == pytest.approx(-0.001) and work["extra_calls"] == 0
    work = added(_step({"train_loop.py:run": [1, 0.001, 0, 0, 1]}), longer)
    assert work["loop_s"] == pytest.approx(0.004) and work["seconds"] == pytest.approx(0.005)
    # never below nothing
    assert added(raw, _step({"train_loop.py:run": [1, 0.0001, 0, 0, 1]}))["seconds"] == 0


def test_a_collectives_time_is_taken_at_the_rank_that_waited_least() -> None:
    # Rank 0 reaches the seed's broadcast 2 ms before rank 1 and waits; rank 1 waits for no one. The
    # other functions keep rank 0's time, and a collective called a different number of times on a
    # rank (another pass) is not mixed in.
    wait = "~:0:<built-in method torch._C._distributed_c10d.wait>"
    broadcast = "~:0:<built-in method torch._C._distributed_c10d.broadcast>"
    rank0 = _step({wait: [1, 0.0021, 0], broadcast: [2, 0.0004, 0], "~:0:len": [5, 0.002, 0]})
    rank1 = _step({wait: [1, 0.0001, 0], broadcast: [3, 0.0001, 0], "~:0:len": [5, 0.001, 0]})
    merged = least_waiting([rank0, rank1])
    assert merged["functions"][wait][1] == pytest.approx(0.0001)
    assert merged["functions"][broadcast][1] == pytest.approx(0.0004)
    assert merged["functions"]["~:0:len"][1] == pytest.approx(0.002)
    assert rank0["functions"][wait][1] == pytest.approx(0.0021)  # the answers are not changed
    assert added(_step({}), merged)["extra_s"] == pytest.approx(0.0001 + 0.0004 + 0.002)
    assert least_waiting([rank0]) == rank0


def test_a_profiled_step_marks_accel_and_names_the_loops_own_functions_without_their_line() -> None:
    from accel_state.collectives.nested import recursively_apply

    def raw_step() -> None:
        torch.ones(2).sum()

    def accel_step() -> None:  # another line of this file, the same role
        recursively_apply(lambda tensor: tensor.sum(), [torch.ones(2)])

    raw, accel = step_work(raw_step, 3), step_work(accel_step, 3)
    ours = [name for name, entry in accel["functions"].items() if entry[2]]
    assert any(name.startswith("accel:nested.py:") and "recursively_apply" in name for name in ours), ours
    assert not any(entry[2] for entry in raw["functions"].values())
    assert accel["functions"][f"{__file__}:accel_step"][0] == 1  # per step
    assert f"{__file__}:raw_step" in raw["functions"] and accel["step_s"] > 0
    assert not any("0x" in name for name in accel["functions"])  # no address: the same name in any process
    assert accel["functions"][f"{__file__}:accel_step"][3] >= 1  # the calls it makes
    assert accel["functions"][f"{__file__}:accel_step"][4] == 1  # the loop's own code
    assert not any(entry[4] for name, entry in accel["functions"].items() if "accel:" in name or "~:" in name)
    callee, caller = accel["profiler_s"]
    assert 0 < callee < 1e-4 and 0 <= caller < 1e-4


def test_the_figure_is_accels_added_seconds_in_percent_of_the_hand_written_time() -> None:
    work = [
        {
            "seconds": s,
            "own_s": s / 2,
            "extra_s": s / 2,
            "own_calls": 11,
            "extra_calls": 1,
            "raw_calls": 100,
            "largest": ["torch:7:all_gather", 1, s / 2],
        }  # fmt: skip
        for s in (0.001, 0.002, 0.003)
    ]
    record = added_work("own work", "g", work, [1.0, 1.0, 0.5], "step", "rank 0", "a note")
    assert record.samples == {"accel": pytest.approx([0.1, 0.2, 0.6])}
    assert record.target == "accel<=1.0" and record.unit == "% of the hand-written step"
    assert "100 calls hand-written" in record.note and "torch:7:all_gather" in record.note
    assert "loop's own lines" not in record.note  # answers that do not count them
    moved = [{**answer, "loop_s": -0.0018} for answer in work]
    note = added_work("own work", "g", moved, [1.0, 1.0, 0.5], "step", "rank 0", "").note
    assert "its loop's own lines 1.8 ms fewer than the hand-written loop's (counted off: work moved" in note


def test_a_collectives_own_work_is_in_percent_of_the_raw_call_and_less_than_raw_adds_nothing():
    from benchmarks.figures.collectives import OWN_TARGET, _own_work

    # ms per call, as the figure keeps them: accel 0.02 ms more around the transport, then 0.01 ms less.
    accel = {
        "own/gather": {1024: [0.02, -0.01]},
        "own/gather_for_metrics": {1024: [0.04, 0.0]},
        "raw/gather": {1024: [0.5, 0.5]},
    }
    rows = {row.figure: row for row in _own_work(accel, (1024,))}
    gather = rows["accel's own work, gather 1 KB, check off"]
    assert gather.samples == {"accel": pytest.approx([4.0, 0.0])}
    assert rows["accel's own work, gather_for_metrics 1 KB, check off"].samples == {
        "accel": pytest.approx([8.0, 0.0])
    }
    assert gather.target == OWN_TARGET == "accel<=5" and gather.unit == "% of the raw call"
    assert "inside the transport" in gather.note
