"""A benchmark target's verdict rests on the interval of a paired ratio's median, not on the median
alone: the interval from order statistics, its coverage, met / missed / undecided, the table and
README cells, and older results files (without intervals) that still load and render. Pure
functions only: no process is started."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import readme, report, stats, table, targets  # noqa: E402
from benchmarks.measurement import Measurement  # noqa: E402


def _ratio(median: float, low: float, high: float, coverage: float = 0.9, rounds: int = 9) -> stats.Summary:
    return stats.Summary(median, low, high, 0.0, rounds, stats.Interval(low, high, coverage))


# The interval of the median ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "k", "reached"),
    [
        (3, 1, 0.75),  # 1 - 2/8: no pair reaches 90%, so the full range and what it reaches
        (5, 1, 0.9375),  # 1 - 2/32
        (7, 1, 0.984375),  # 1 - 2/128; x(2), x(6) would reach only 0.875
        (9, 2, 0.9609375),  # 1 - 2*(1+9)/512; x(3), x(7) would reach only 0.82
        (15, 4, 0.96484375),  # 1 - 2*(1+15+105+455)/32768; x(5), x(11) would reach only 0.88
    ],
)
def test_the_narrowest_pair_of_order_statistics_that_reaches_90_percent(
    n: int, k: int, reached: float
) -> None:
    assert stats.order_statistic(n) == k
    assert stats.coverage(n, k) == pytest.approx(reached)
    if k + 1 <= (n + 1) // 2:
        assert stats.coverage(n, k + 1) < stats.CONFIDENCE


def test_the_interval_of_known_data() -> None:
    assert stats.median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == stats.Interval(1.0, 5.0, 0.9375)
    nine = [9.0, 2.0, 7.0, 1.0, 5.0, 3.0, 8.0, 4.0, 6.0]
    assert stats.median_interval(nine) == stats.Interval(2.0, 8.0, 0.9609375)
    fifteen = [float(value) for value in range(15, 0, -1)]
    assert stats.median_interval(fifteen) == stats.Interval(4.0, 12.0, 0.96484375)
    assert stats.median_interval([]) is None


def test_only_a_ratio_of_paired_rounds_carries_an_interval() -> None:
    paired = stats.ratio([2.0, 3.0, 4.0], [2.0, 2.0, 2.0])
    assert paired is not None and paired.median == 1.5
    assert paired.interval == stats.Interval(1.0, 2.0, 0.75)
    unpaired = stats.ratio([2.0, 3.0, 4.0], [2.0, 2.0])
    assert unpaired is not None and unpaired.median == 1.5 and unpaired.interval is None
    contender = stats.summarize([2.0, 3.0, 4.0])
    assert contender is not None and contender.interval is None


# The verdict ---------------------------------------------------------------------------------------
def test_met_when_the_whole_interval_satisfies_the_bound() -> None:
    status, detail = targets.check("accel/raw>=0.99", {}, {"accel/raw": _ratio(1.02, 0.995, 1.05)})
    assert status == targets.MET
    assert detail == "accel/raw = 1.02 >= 0.99 across its 90% interval 0.995-1.05"


def test_missed_when_the_whole_interval_violates_the_bound() -> None:
    status, detail = targets.check("accel/raw<=1.05", {}, {"accel/raw": _ratio(1.2, 1.1, 1.3, 0.9375)})
    assert status == targets.MISSED
    assert detail == "accel/raw = 1.2, not <= 1.05 across its 94% interval 1.1-1.3"


def test_undecided_when_the_interval_straddles_the_bound() -> None:
    status, detail = targets.check("accel/raw>=0.99", {}, {"accel/raw": _ratio(0.983, 0.91, 1.06)})
    assert status == targets.UNDECIDED
    assert detail == (
        "accel/raw = 0.983 (90% interval 0.91-1.06) straddles 0.99: more rounds or a quieter machine needed"
    )


def test_a_contender_and_an_unpaired_ratio_are_judged_on_their_median() -> None:
    assert targets.check("accel<0.1", {"accel": 0.085}, {})[0] == targets.MET
    assert targets.check("accel<0.1", {"accel": 0.12}, {})[0] == targets.MISSED
    unpaired = stats.Summary(0.983, 0.983, 0.983, 0.0, 5)
    status, detail = targets.check("accel/raw>=0.99", {}, {"accel/raw": unpaired})
    assert (status, detail) == (targets.MISSED, "accel/raw = 0.983, not >= 0.99")


def test_a_target_takes_its_worst_clause() -> None:
    straddling = {"accel/raw": _ratio(0.97, 0.85, 0.99)}  # straddles 0.98, lies wholly below 1.1
    assert targets.check("accel/raw<1.1;accel/raw<0.98", {}, straddling)[0] == targets.UNDECIDED
    assert targets.check("accel/raw<0.98;accel/raw>1", {}, straddling)[0] == targets.MISSED
    assert targets.check("accel/raw<0.98;accel<1", {}, straddling)[0] == targets.UNDECIDED
    assert targets.check("accel/raw<1.1;accel<1", {}, straddling)[0] == targets.UNCHECKED


# Records, table and README -------------------------------------------------------------------------
def _run(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": report.SCHEMA,
        "date": "2026-12-02T23:54:10Z",
        "machine": {"hostname": "vm", "cpu": "a CPU", "cores": 2, "platform": "Linux"},
        "versions": {"python": "3.11.7"},
        "options": {"quick": False, "rounds": 3, "only": None, "contenders": ["raw", "accel"]},
        "absent": {},
        "figures": {"nd_parallel": {"seconds": 1.0, "error": None}},
        "measurements": measurements,
        "plots": [],
    }


def _measurement(accel: list[float], target: str = "accel/raw>=0.99") -> Measurement:
    return Measurement(
        figure="N-D train, HSDP 2x2",
        group="nd_parallel",
        unit="steps/s",
        higher_is_better=True,
        samples={"raw": [1.0] * len(accel), "accel": accel},
        target=target,
    )


def _old_record() -> dict[str, Any]:
    """A record as written before intervals: its ratio cells lack one, its verdict read the median."""
    record = report.measurement_record("nd_parallel", _measurement([0.95, 0.983, 1.2]))
    for cell in [*record["summary"].values(), *record["ratios"].values()]:
        del cell["interval"]
    record["target_status"], record["target_detail"] = "missed", "accel/raw = 0.983, not >= 0.99"
    return record


def test_a_record_holds_the_interval_and_its_verdict_in_json() -> None:
    record = json.loads(
        json.dumps(report.measurement_record("nd_parallel", _measurement([0.95, 0.983, 1.2])))
    )
    assert record["ratios"]["accel/raw"]["interval"] == {"low": 0.95, "high": 1.2, "coverage": 0.75}
    assert record["summary"]["accel"]["interval"] is None
    assert record["target_status"] == targets.UNDECIDED
    quick = report.measurement_record("nd_parallel", _measurement([0.95]), quick=True)
    assert quick["target_status"] == targets.UNCHECKED


def test_the_table_shows_the_interval_and_names_missed_and_undecided_targets_apart() -> None:
    undecided = report.measurement_record("nd_parallel", _measurement([0.91, 0.95, 0.983, 1.01, 1.06]))
    missed = report.measurement_record("nd_parallel", _measurement([0.9, 0.92, 0.93, 0.94, 0.95]))
    missed["figure"] = "N-D train, DDP"
    run = _run([undecided, missed])
    rows = table.rows(run)
    assert rows[0][4] == "0.983 [0.910, 1.060]" and rows[0][6] == "undecided (accel/raw>=0.99)"
    assert rows[1][4] == "0.930 [0.900, 0.950]" and rows[1][6] == "MISSED (accel/raw>=0.99)"
    notes = table.footnotes(run)
    assert notes[0].startswith("target missed: N-D train, DDP: accel/raw = 0.93, not >= 0.99")
    assert notes[1].startswith("target undecided: N-D train, HSDP 2x2: accel/raw = 0.983 (94% interval")
    three = table.rows(_run([report.measurement_record("nd_parallel", _measurement([0.95, 0.983, 1.2]))]))
    assert three[0][4] == "0.983 [0.950, 1.200] (75%)"  # too few rounds for 90%: says what it reached
    assert "undecided when the" in readme.HOW_TO_RUN and "90% binomial coverage" in readme.HOW_TO_RUN


def test_an_old_record_without_intervals_renders_as_written(tmp_path: Path) -> None:
    run = _run([_old_record()])
    assert table.rows(run)[0][4].startswith("0.983 ±")
    text = readme.render(run, tmp_path / "old.json", tmp_path / "README.md")
    assert "MISSED (accel/raw>=0.99)" in text and "- target missed: N-D train, HSDP 2x2" in text
    assert "N-D train, HSDP 2x2" in table.text(run)


def test_an_old_results_file_loads_with_its_verdict_judged_again(tmp_path: Path) -> None:
    path = tmp_path / "2026-12-02-235410-vm-2cpu.json"
    path.write_text(json.dumps(_run([_old_record()])))
    [record] = report.load(path)["measurements"]
    assert record["ratios"]["accel/raw"]["interval"] == {"low": 0.95, "high": 1.2, "coverage": 0.75}
    assert record["target_status"] == targets.UNDECIDED
    assert "straddles 0.99" in record["target_detail"]
    text = readme.render(report.load(path), path, tmp_path / "README.md")
    assert "| 0.983 [0.950, 1.200] (75%) |" in text and "- target undecided: N-D train, HSDP 2x2" in text


def test_an_old_record_that_cannot_be_judged_again_is_one_line_naming_file_and_figure(tmp_path: Path) -> None:
    broken = _old_record()
    del broken["unit"]
    path = tmp_path / "2026-12-02-235410-vm-2cpu.json"
    path.write_text(json.dumps(_run([broken])))
    with pytest.raises(SystemExit) as failure:
        report.load(path)
    message = str(failure.value)
    assert "\n" not in message and str(path) in message and "'N-D train, HSDP 2x2'" in message
    assert "unit" in message


# Measuring some figures again (--update) ---------------------------------------------------------
def _figure_run(
    date: str, rows: dict[str, list[float]], rounds: int = 3, steal: float = 20.0
) -> dict[str, Any]:
    """A run whose figures (modules) each hold one N-D row measured with `rows[module]` as accel's."""
    measurements = []
    for module, accel in rows.items():
        record = report.measurement_record(module, _measurement(accel))
        record["figure"] = f"{module} row"
        measurements.append(record)
    run = _run(measurements)
    run["date"] = date
    run["options"]["rounds"] = rounds
    run["figures"] = {module: {"seconds": 1.0, "error": None, "steal_pct": steal} for module in rows}
    return run


def test_an_update_replaces_the_figures_measured_again_in_place_and_dates_each(tmp_path: Path) -> None:
    previous = _figure_run(
        "2026-12-03T12:59:29Z", {"startup": [1.0] * 3, "collectives": [0.5] * 3, "memory": [1.0] * 3}
    )
    fresh = _figure_run("2026-12-03T17:00:00Z", {"collectives": [0.98, 0.99, 1.0, 1.01, 1.02]}, 5, 1.5)
    run = report.merged(previous, fresh)
    assert [record["figure"] for record in run["measurements"]] == [
        "startup row",
        "collectives row",
        "memory row",
    ]
    assert run["measurements"][1]["summary"]["accel"]["rounds"] == 5
    assert (
        run["figures"]["startup"]["date"] == "2026-12-03T12:59:29Z"
        and run["figures"]["startup"]["rounds"] == 3
    )
    assert run["figures"]["collectives"]["steal_pct"] == 1.5 and run["options"]["updated"] == ["collectives"]
    text = readme.render(run, tmp_path / "run.json", tmp_path / "README.md")
    assert "- measured again 2026-12-03T17:00:00Z: collectives (5 rounds, steal 1.5%)" in text
    assert "startup (" not in text.split("## Results")[0]  # measured on the run's own date


def test_an_update_refuses_results_of_another_machine_or_other_versions() -> None:
    previous = _figure_run("2026-12-03T12:59:29Z", {"startup": [1.0] * 3})
    other_machine = _figure_run("2026-12-03T17:00:00Z", {"startup": [1.0] * 3})
    other_machine["machine"]["cpu"] = "another CPU"
    with pytest.raises(SystemExit, match=r"another machine \(cpu 'a CPU', here 'another CPU'\)"):
        report.merged(previous, other_machine)
    other_versions = _figure_run("2026-12-03T17:00:00Z", {"startup": [1.0] * 3})
    other_versions["versions"]["python"] = "3.12.0"
    with pytest.raises(SystemExit, match="other versions of python"):
        report.merged(previous, other_versions)
    quick = _figure_run("2026-12-03T12:59:29Z", {"startup": [1.0]})
    quick["options"]["quick"] = True
    with pytest.raises(SystemExit, match="the latest results are a quick run"):
        report.merged(quick, _figure_run("2026-12-03T17:00:00Z", {"startup": [1.0] * 3}))


def test_update_needs_the_figures_to_measure_again(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import runner

    with pytest.raises(SystemExit):
        runner.parse_args(["--update"])
    assert "--update needs --only" in capsys.readouterr().err
    assert runner.parse_args(["--update", "--only", "collectives"]).update


def test_some_figures_into_the_main_folder_are_refused_unless_they_update_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The main folder's newest full run is the main README's table: a run of one figure there would
    # take the other figures' rows out of it.
    from benchmarks import runner

    with pytest.raises(SystemExit):
        runner.parse_args(["--only", "nd_parallel", "--rounds", "3"])
    error = capsys.readouterr().err
    assert "--only nd_parallel into benchmarks/results" in error and "--update" in error
    assert "benchmarks/results/nd_parallel" in error
    assert runner.parse_args(["--only", "nd_parallel", "--update"]).figures == ["nd_parallel"]
    assert runner.parse_args(["--only", "startup", "--output", str(tmp_path)]).output == tmp_path
    assert runner.parse_args(["--quick", "--only", "startup"]).quick  # a quick run never becomes the table
    assert runner.parse_args(["--only", ",".join(runner.figure_names())]).figures == runner.figure_names()


# Pooling more rounds with the latest ones (--add-rounds) -----------------------------------------
def test_added_rounds_pool_with_the_same_rows_keep_each_round_paired_and_decide_a_verdict(
    tmp_path: Path,
) -> None:
    previous = _figure_run(
        "2026-12-06T09:47:26Z", {"startup": [1.0] * 3, "compile": [1.0, 1.01, 1.02, 1.0, 0.9]}, 5, 0.0
    )
    assert previous["measurements"][1]["target_status"] == "undecided"  # 5 rounds: the whole range
    fresh = _figure_run("2026-12-06T12:00:00Z", {"compile": [1.01, 1.0, 1.02]}, 3, 0.5)
    run = report.pooled(previous, fresh)
    row = run["measurements"][1]
    assert row["samples"]["accel"] == [1.0, 1.01, 1.02, 1.0, 0.9, 1.01, 1.0, 1.02]
    assert row["samples"]["raw"] == [1.0] * 8 and row["summary"]["accel"]["rounds"] == 8
    assert row["target_status"] == "met"  # 8 rounds: the interval leaves out the slow one
    assert row["note"] == previous["measurements"][1]["note"]  # the same job, the same note
    assert run["measurements"][0] == previous["measurements"][0]
    figure = run["figures"]["compile"]
    assert figure["rounds"] == 8 and figure["date"] == "2026-12-06T12:00:00Z" and figure["steal_pct"] == 0.5
    assert figure["pooled_with"] == [{"date": "2026-12-06T09:47:26Z", "rounds": 5, "steal_pct": 0.0}]
    text = readme.render(run, tmp_path / "run.json", tmp_path / "README.md")
    assert (
        "- measured again 2026-12-06T12:00:00Z: compile (8 rounds, steal 0.5%, pooled with the rounds "
        "of the same rows measured before: 5 of 2026-12-06T09:47:26Z)" in text
    )


def test_added_rounds_refuse_rows_measured_otherwise_missing_or_unpaired() -> None:
    previous = _figure_run("2026-12-06T09:47:26Z", {"compile": [1.0] * 5}, 5)
    other_unit = _figure_run("2026-12-06T12:00:00Z", {"compile": [1.0] * 3}, 3)
    other_unit["measurements"][0]["unit"] = "ms"
    with pytest.raises(
        SystemExit, match=r"row 'compile row' was measured with another unit \('steps/s', now 'ms'\)"
    ):
        report.pooled(previous, other_unit)
    renamed = _figure_run("2026-12-06T12:00:00Z", {"compile": [1.0] * 3}, 3)
    renamed["measurements"][0]["figure"] = "compile other row"
    with pytest.raises(SystemExit, match=r"row 'compile other row' is in one run only"):
        report.pooled(previous, renamed)
    unpaired = _figure_run("2026-12-06T12:00:00Z", {"compile": [1.0] * 3}, 3)
    unpaired["measurements"][0]["samples"]["raw"] = [1.0, 1.0]
    with pytest.raises(SystemExit, match=r"row 'compile row' has unpaired rounds \(raw 2, accel 3\)"):
        report.pooled(previous, unpaired)
    other_versions = _figure_run("2026-12-06T12:00:00Z", {"compile": [1.0] * 3}, 3)
    other_versions["versions"]["python"] = "3.12.0"
    with pytest.raises(
        SystemExit, match="--add-rounds: the latest results were measured with other versions"
    ):
        report.pooled(previous, other_versions)


def test_added_rounds_keep_the_newest_note_and_say_whose_figures_it_holds() -> None:
    previous = _figure_run("2026-12-06T09:47:26Z", {"loader": [1.0] * 5}, 5)
    previous["measurements"][0]["note"] = "wall-clock medians (us): accel 108.6"
    fresh = _figure_run("2026-12-06T12:00:00Z", {"loader": [1.0] * 3}, 3)
    fresh["measurements"][0]["note"] = "wall-clock medians (us): accel 106.3"
    (row,) = report.pooled(previous, fresh)["measurements"]
    assert row["note"] == "wall-clock medians (us): accel 106.3 (the figures in this note: the last 3 rounds)"


def test_add_rounds_needs_the_figures_and_excludes_update(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import runner

    with pytest.raises(SystemExit):
        runner.parse_args(["--add-rounds"])
    assert "--add-rounds needs --only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.parse_args(["--add-rounds", "--update", "--only", "compile"])
    assert "choose one" in capsys.readouterr().err
    assert runner.parse_args(["--add-rounds", "--only", "compile", "--rounds", "3"]).add_rounds


def test_add_rounds_refuses_before_measuring_where_there_is_nothing_to_add_to(tmp_path: Path) -> None:
    from benchmarks import runner

    arguments = ["--add-rounds", "--only", "compile", "--output", str(tmp_path)]
    with pytest.raises(SystemExit, match="--add-rounds: no results file in"):
        runner.main(arguments)
    run = _figure_run("2026-12-06T09:47:26Z", {"loader": [1.0] * 3}, 3)
    report.write(run, tmp_path / "2026-12-06-094726-vm-2cpu.json")
    with pytest.raises(SystemExit, match="vm-2cpu.json has no rounds of compile to add to"):
        runner.main(arguments)


# Which CPU measured what -------------------------------------------------------------------------
_ZEN4_FLAGS = "fpu sse2 avx avx2 avx512f avx512_vnni avx512_bf16 sha_ni"


def _cpuinfo(tmp_path: Path, model: int, flags: str) -> Path:
    block = (
        f"processor\t: {{n}}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: {model}\n"
        f"model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: {flags}\n"
    )
    path = tmp_path / f"cpuinfo-{model}"
    path.write_text(block.format(n=0) + "\n" + block.format(n=1))
    return path


def test_two_cpus_of_one_model_name_are_told_apart_by_identity_and_kernel_instruction_sets(
    tmp_path: Path,
) -> None:
    # Both hosts call their CPU "AMD EPYC"; only one runs torch's bf16 kernels in hardware.
    from benchmarks import machine

    zen3 = machine.cpu_identity(_cpuinfo(tmp_path, 1, "fpu sse2 avx avx2 sha_ni"))
    zen4 = machine.cpu_identity(_cpuinfo(tmp_path, 17, _ZEN4_FLAGS))
    assert zen3 == {"cpu_id": "AuthenticAMD family 25 model 1 stepping 1", "isa": "avx2"}
    assert zen4 == {
        "cpu_id": "AuthenticAMD family 25 model 17 stepping 1",
        "isa": "avx2 avx512f avx512_bf16 avx512_vnni",
    }
    assert machine.cpu_identity(tmp_path / "absent") == {}
    assert (
        machine.label({"cpu": "AMD EPYC", **zen3})
        == "AMD EPYC, AuthenticAMD family 25 model 1 stepping 1, avx2"
    )
    assert machine.label({"cpu": "AMD EPYC"}) == "AMD EPYC"  # results written before the identity


def _on(run: dict[str, Any], cpu_id: str | None, isa: str | None) -> dict[str, Any]:
    if cpu_id is not None:
        run["machine"].update(cpu_id=cpu_id, isa=isa)
    return run


def test_rounds_pool_only_with_rounds_of_the_same_cpu() -> None:
    previous = _on(
        _figure_run("2026-12-06T09:47:26Z", {"training": [1.0] * 5}, 5), "AMD f25 m17", "avx2 avx512_bf16"
    )
    other_isa = _on(_figure_run("2026-12-07T12:00:00Z", {"training": [1.0] * 3}, 3), "AMD f25 m17", "avx2")
    with pytest.raises(SystemExit, match=r"another machine \(isa 'avx2 avx512_bf16', here 'avx2'\)"):
        report.pooled(previous, other_isa)
    unrecorded = _figure_run("2026-12-06T09:47:26Z", {"training": [1.0] * 5}, 5)
    with pytest.raises(SystemExit, match=r"do not record the CPU's cpu_id \(here 'AMD f25 m1'\)"):
        report.pooled(
            unrecorded,
            _on(_figure_run("2026-12-07T12:00:00Z", {"training": [1.0] * 3}, 3), "AMD f25 m1", "avx2"),
        )
    same = _on(
        _figure_run("2026-12-07T12:00:00Z", {"training": [1.0] * 3}, 3), "AMD f25 m17", "avx2 avx512_bf16"
    )
    assert report.pooled(previous, same)["figures"]["training"]["rounds"] == 8


def test_rounds_pool_with_the_cpu_that_measured_the_figure_not_the_first_run(tmp_path: Path) -> None:
    # A full run of old, then one figure measured again on a recorded CPU: more rounds of that
    # figure pool with it on that CPU, and each figure names its own CPU where targets stand.
    full = _figure_run("2026-12-03T12:59:29Z", {"startup": [1.0] * 3, "training": [1.0] * 3})
    zen3 = _on(_figure_run("2026-12-07T07:06:24Z", {"training": [1.0] * 5}, 5), "AMD f25 m1", "avx2")
    updated = report.merged(full, zen3)
    assert updated["figures"]["startup"]["machine"]["cpu"] == "a CPU"
    assert updated["figures"]["training"]["machine"]["cpu_id"] == "AMD f25 m1"
    more = _on(_figure_run("2026-12-07T12:00:00Z", {"training": [1.0] * 3}, 3), "AMD f25 m1", "avx2")
    assert report.pooled(updated, more)["figures"]["training"]["rounds"] == 8
    with pytest.raises(SystemExit, match="do not record the CPU's cpu_id"):
        report.pooled(
            updated, _on(_figure_run("2026-12-07T12:00:00Z", {"startup": [1.0] * 3}, 3), "AMD f25 m1", "avx2")
        )
    text = readme.render(updated, tmp_path / "run.json", tmp_path / "README.md")
    assert (
        "- measured again 2026-12-07T07:06:24Z: training (5 rounds, steal 20%, on a CPU, AMD f25 m1, avx2)"
        in text
    )


def test_a_run_on_another_machine_is_refused_before_anything_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import runner

    def measured(*_: Any) -> Any:
        raise AssertionError("measured before the machine was checked")

    monkeypatch.setattr(runner, "run_figure", measured)
    elsewhere = _figure_run("2026-12-06T09:47:26Z", {"startup": [1.0] * 3}, 3)
    elsewhere["machine"]["hostname"] = "another-host"
    report.write(elsewhere, tmp_path / "2026-12-06-094726-vm-2cpu.json")
    for flag in ("--update", "--add-rounds"):
        with pytest.raises(SystemExit, match=rf"{flag}: the latest results were measured on another machine"):
            runner.main([flag, "--only", "startup", "--output", str(tmp_path)])
