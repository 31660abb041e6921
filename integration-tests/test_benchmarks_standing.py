"""Where every target stands: the newest verdict of each target across the results folders, and the
causes written for those not met (benchmarks/causes.toml) kept in step with the committed results.
Pure functions and files only: no process is started."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import readme, report, standing, targets  # noqa: E402
from benchmarks.measurement import Measurement  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results"


# The committed results and causes.toml --------------------------------------------------------------
def test_every_missed_target_of_the_committed_results_says_why() -> None:
    standings = standing.newest(RESULTS)
    assert standings, "no results with targets under benchmarks/results"
    unexplained = [s.figure for s in standings if s.status == targets.MISSED and s.cause is None]
    assert not unexplained, f"missed targets without a cause in {standing.CAUSES}: {unexplained}"


def test_no_cause_names_a_met_figure_or_one_that_does_not_exist() -> None:
    verdicts = {s.figure: s.status for s in standing.newest(RESULTS)}
    for index, table in enumerate(tomllib.loads(standing.CAUSES.read_text())["cause"], start=1):
        unknown = [figure for figure in table["figures"] if figure not in verdicts]
        assert not unknown, f"cause {index} names figures no results measure: {unknown}"
        met = [figure for figure in table["figures"] if verdicts[figure] == targets.MET]
        assert not met, f"cause {index} is stale for figures met now: {met}"


def test_the_committed_readme_shows_where_every_target_stands() -> None:
    text = (REPO_ROOT / "benchmarks" / "README.md").read_text()
    assert "## Where every target stands" in text
    for found in standing.newest(RESULTS):
        if found.status == targets.MISSED:
            assert f"| {found.figure} | MISSED ({found.target})" in text, found.figure


# Picking the newest verdict --------------------------------------------------------------------------
def _record(figure: str, accel: list[float], target: str = "accel/raw<=1.05") -> dict[str, Any]:
    measurement = Measurement(
        figure=figure, group="collectives", unit="ms", higher_is_better=False,
        samples={"raw": [1.0] * len(accel), "accel": accel}, target=target,
    )  # fmt: skip
    return report.measurement_record("collectives", measurement)


def _write_run(folder: Path, date: str, records: list[dict[str, Any]], quick: bool = False) -> Path:
    run = report.run_record(
        date=date,
        machine={"hostname": "vm", "cpu": "a CPU", "cores": 2, "platform": "Linux"},
        versions={"python": "3.11.7"},
        options={"quick": quick, "rounds": len(records[0]["samples"]["accel"]), "only": None},
        absent={},
        figures={"collectives": {"seconds": 1.0, "error": None}},
        measurements=records,
    )
    path = folder / f"{date[:10]}-vm-2cpu.json"
    report.write(run, path)
    return path


def test_the_newest_verdict_of_a_figure_wins_across_folders(tmp_path: Path) -> None:
    _write_run(
        tmp_path,
        "2026-12-01T00:00:00Z",
        [_record("gather 1 MB", [1.2] * 9), _record("gather 8 MB", [1.0] * 9)],
    )
    newer = _write_run(tmp_path / "data_paths", "2026-12-03T00:00:00Z", [_record("gather 1 MB", [1.0] * 9)])
    _write_run(tmp_path / "quick", "2026-12-04T00:00:00Z", [_record("gather 1 MB", [2.0])], quick=True)
    found = {s.figure: s for s in standing.newest(tmp_path)}
    assert set(found) == {"gather 1 MB", "gather 8 MB"}
    assert found["gather 1 MB"].status == targets.MET and found["gather 1 MB"].results == newer
    assert found["gather 1 MB"].date == "2026-12-03T00:00:00Z" and found["gather 1 MB"].rounds == 9
    assert found["gather 8 MB"].results.parent == tmp_path


def test_an_undecided_target_says_how_many_rounds_would_decide_it_and_which_way_it_leans(
    tmp_path: Path,
) -> None:
    spread = [0.9, 0.95, 1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.2]  # median 1.04, interval about [0.95, 1.1]
    leaning = [1.0, 1.02, 1.04, 1.06, 1.07, 1.08, 1.1, 1.12, 1.2]  # median 1.07: on the wrong side
    _write_run(
        tmp_path, "2026-12-01T00:00:00Z", [_record("gather 1 KB", spread), _record("gather 64 KB", leaning)]
    )
    no_causes = tmp_path / "causes.toml"  # the repository's may name these figures
    no_causes.write_text("")
    found = {s.figure: s for s in standing.newest(tmp_path, no_causes)}
    even, lean = found["gather 1 KB"], found["gather 64 KB"]
    assert even.status == lean.status == targets.UNDECIDED
    assert not even.leans_missed and lean.leans_missed
    record = _record("gather 1 KB", spread)
    interval = record["ratios"]["accel/raw"]["interval"]
    reach = max(1.04 - interval["low"], interval["high"] - 1.04)
    assert even.rounds_needed == pytest.approx(9 * (reach / 0.01) ** 2, abs=1)
    assert even.detail == f"accel/raw 1.04 [{interval['low']:.3g}, {interval['high']:.3g}]"
    rows = "\n".join(standing.markdown([even], tmp_path / "README.md"))
    assert f"about {even.rounds_needed} rounds at this spread would decide it" in rows


# causes.toml ---------------------------------------------------------------------------------------
def test_a_cause_is_joined_to_its_figures_and_shown_in_the_readme(tmp_path: Path) -> None:
    causes = tmp_path / "causes.toml"
    causes.write_text('[[cause]]\nfigures = ["gather 1 MB"]\nwhy = """A round\ntrip."""\nneeds = "NCCL."\n')
    path = _write_run(tmp_path, "2026-12-01T00:00:00Z", [_record("gather 1 MB", [1.2] * 9)])
    found = standing.newest(tmp_path, causes)
    assert (
        found[0].status == targets.MISSED and found[0].cause == "A round trip." and found[0].needs == "NCCL."
    )
    text = readme.render(report.load(path), path, tmp_path / "README.md", found)
    assert "| gather 1 MB | MISSED (accel/raw<=1.05): accel/raw 1.2 [1.2, 1.2] |" in text
    assert "A round trip. **Needs:** NCCL. |" in text
    assert "(0 of 1 met)" in text


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('[[cause]]\nfigures = "gather 1 MB"\nwhy = "x"\nneeds = "y"\n', "cause 1 needs figures (a list)"),
        ('[[cause]]\nfigures = ["a"]\nwhy = "x"\n', "cause 1 needs figures (a list), why and needs"),
        (2 * '[[cause]]\nfigures = ["a"]\nwhy = "x"\nneeds = "y"\n', "figure 'a' has two causes"),
        ("[[cause]\n", "causes.toml: "),
    ],
)
def test_a_malformed_causes_file_is_one_error_naming_it(tmp_path: Path, text: str, complaint: str) -> None:
    causes = tmp_path / "causes.toml"
    causes.write_text(text)
    with pytest.raises(standing.CausesError, match="causes.toml") as raised:
        standing.read_causes(causes)
    assert complaint in str(raised.value) and "\n" not in str(raised.value)


def test_the_newest_plots_of_each_folder_are_linked(tmp_path: Path) -> None:
    older = _write_run(tmp_path / "scaling", "2026-12-01T00:00:00Z", [_record("gather 1 MB", [1.0] * 3)])
    newer = _write_run(tmp_path / "scaling", "2026-12-03T00:00:00Z", [_record("gather 1 MB", [1.0] * 3)])
    for path in (older, newer):
        run = report.load(path)
        run["plots"] = [f"{path.stem}-launch-scale.png"]
        report.write(run, path)
    _write_run(tmp_path / "no_plots", "2026-12-03T00:00:00Z", [_record("gather 8 MB", [1.0] * 3)])
    lines = standing.newest_plots(tmp_path, tmp_path / "README.md")
    assert lines == [
        f"- `scaling/` (2026-12-03, 3 rounds): [launch-scale](scaling/{newer.stem}-launch-scale.png)"
    ]
    section = standing.markdown(standing.newest(tmp_path), tmp_path / "README.md", lines)
    assert lines[0] in section and section.index(lines[0]) > section.index("| --- | --- | --- | --- |")


def test_the_plots_line_counts_the_rounds_of_figures_given_more_or_measured_again(tmp_path: Path) -> None:
    path = _write_run(tmp_path / "compile", "2026-12-03T00:00:00Z", [_record("gather 1 MB", [1.0] * 5)])
    run = report.load(path)
    run["plots"] = [f"{path.stem}-time.png"]
    run["figures"]["collectives"]["rounds"] = 8  # 5 of the run, 3 added (--add-rounds)
    report.write(run, path)
    assert "(2026-12-03, 8 rounds)" in standing.newest_plots(tmp_path, tmp_path / "README.md")[0]
    run["figures"]["memory"] = {"seconds": 1.0, "error": None}  # the run's own 5
    report.write(run, path)
    assert "(2026-12-03, 5-8 rounds)" in standing.newest_plots(tmp_path, tmp_path / "README.md")[0]


def test_a_stored_target_that_cannot_be_parsed_stands_as_not_checked(tmp_path: Path) -> None:
    _write_run(tmp_path, "2026-12-01T00:00:00Z", [_record("gather 1 MB", [1.0] * 3, target="accel=>1")])
    (found,) = standing.newest(tmp_path)
    assert found.status == targets.UNCHECKED and "is not '<contender>" in found.detail
    assert found.rounds_needed is None and not found.leans_missed
