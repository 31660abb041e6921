"""`accel plot`: reading the trackers' JSON-lines and TensorBoard logs, drawing a PNG, and one-line errors.

The logs are written as accel's trackers write them (accel-launch sits below `accel` and cannot import
its trackers here): `<project_dir>/<run_name>/metrics.jsonl` with one `{"step": ..., "values": {...}}`
per line, and TensorBoard events from torch's SummaryWriter. integration-tests/test_plot_launch.py
draws logs that the real trackers wrote in a launched job.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.runs.logs import RunLogError, load_runs

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (it comes with accel-launch[plot] and accel-launch[test])",
)
needs_tensorboard = pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="tensorboard is not installed (it comes with accel-launch[test])",
)
BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's C0 and C1: the first two runs' lines


def write_jsonl(project_dir: Path, run_name: str, records: list[dict]) -> Path:
    """Write records as JSONLinesTracker does: `project_dir/run_name/metrics.jsonl`, one object a line."""
    folder = project_dir / run_name
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": record.pop("step", None), "values": record}) for record in records]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "config.json").write_text('{"lr": 0.1}\n', encoding="utf-8")
    return folder


def training_records(scale: float, steps: int = 20) -> list[dict]:
    return [
        {"step": step, "loss": scale / (step + 1), "accuracy": 1 - 0.5 / (step + 1)} for step in range(steps)
    ]


def write_tensorboard(folder: Path, steps: int = 5) -> None:
    """Write scalars as TensorBoardTracker does (torch's SummaryWriter), with add_scalars and add_hparams."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    writer.add_hparams({"lr": 0.1}, metric_dict={})
    for step in range(steps):
        writer.add_scalar("loss", 2.0 / (step + 1), global_step=step)
        writer.add_scalars("l1", {"train": float(step), "eval": 2.0 * step}, global_step=step)
        writer.add_text("note", "text is not plotted", global_step=step)
    writer.close()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def pixels_near(path: Path, colour: tuple[int, int, int], tolerance: int = 40) -> int:
    """Return how many pixels of the PNG are within `tolerance` of `colour` in every channel."""
    from matplotlib.image import imread

    image = (imread(str(path))[..., :3] * 255).astype(int)
    return int((abs(image - colour) <= tolerance).all(axis=-1).sum())


def invoke(*args: str):
    return CliRunner().invoke(accel, ["plot", *args])


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("accel: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# Reading the logs ------------------------------------------------------------------------------


def test_jsonl_keeps_numbers_flattens_dicts_and_numbers_null_steps_by_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [
        {"step": None, "values": {"loss": 1.5, "name": "x", "flag": True, "hist": [1, 2]}},
        {"step": None, "values": {"loss": 1.0, "l1": {"train": 3, "eval": 4.5, "tag": "no"}}},
        {"step": 10, "values": {"loss": 0.5}},
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    [run] = load_runs([str(folder)])
    assert run.name == "run"
    assert sorted(run.metrics) == ["l1/eval", "l1/train", "loss"]
    assert run.metrics["loss"].steps == [0.0, 1.0, 10.0]
    assert run.metrics["loss"].values == [1.5, 1.0, 0.5]
    assert (run.metrics["l1/eval"].steps, run.metrics["l1/eval"].values) == ([1.0], [4.5])


def test_a_project_dir_holds_runs_named_after_it_and_a_run_folder_after_itself(tmp_path):
    project = tmp_path / "project"
    write_jsonl(project, "lr_0.1", training_records(1.0))
    write_jsonl(project, "lr_0.01", training_records(2.0))
    (project / "checkpoints" / "checkpoint_0").mkdir(parents=True)  # other folders are not runs
    single = write_jsonl(tmp_path / "other", "solo", training_records(3.0))
    runs = load_runs([str(project), str(single)])
    assert [run.name for run in runs] == ["project/lr_0.01", "project/lr_0.1", "solo"]
    assert runs[2].metrics["loss"].values[0] == 3.0


def test_runs_that_would_share_a_name_are_named_by_their_paths(tmp_path):
    first = write_jsonl(tmp_path / "a", "train", training_records(1.0))
    second = write_jsonl(tmp_path / "b", "train", training_records(2.0))
    runs = load_runs([str(first), str(second)])
    assert [run.name for run in runs] == [str(first), str(second)]


@needs_tensorboard
@pytest.mark.slow  # imports matplotlib or torch's SummaryWriter: seconds
def test_tensorboard_events_are_read_with_add_scalars_as_tag_slash_key(tmp_path):
    write_tensorboard(tmp_path / "project" / "run")
    [run] = load_runs([str(tmp_path / "project")])
    assert run.name == "project/run"
    assert sorted(run.metrics) == ["l1/eval", "l1/train", "loss"]
    assert run.metrics["loss"].steps == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert run.metrics["loss"].values == pytest.approx([2.0, 1.0, 2 / 3, 0.5, 0.4])
    assert run.metrics["l1/eval"].values == [0.0, 2.0, 4.0, 6.0, 8.0]


@needs_tensorboard
@pytest.mark.slow  # imports matplotlib or torch's SummaryWriter: seconds
def test_metrics_jsonl_is_read_instead_of_events_beside_it(tmp_path):
    folder = write_jsonl(tmp_path, "run", [{"step": 0, "only_in_jsonl": 1.0}])
    write_tensorboard(folder)
    [run] = load_runs([str(folder)])
    assert list(run.metrics) == ["only_in_jsonl"]


def test_tensorboard_only_run_without_tensorboard_is_refused_with_the_install_hint(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(
        RunLogError, match=r"run: holds TensorBoard event files only.*pip install tensorboard"
    ):
        load_runs([str(folder)])


# Drawing ---------------------------------------------------------------------------------------


@needs_matplotlib
@pytest.mark.slow  # imports matplotlib or torch's SummaryWriter: seconds
def test_two_runs_side_by_side_make_a_non_blank_png_of_two_panels(tmp_path):
    project = tmp_path / "project"
    write_jsonl(project, "run_a", training_records(1.0))
    write_jsonl(project, "run_b", training_records(4.0))
    output = tmp_path / "curves.png"
    result = invoke(str(project / "run_a"), str(project / "run_b"), "-o", str(output))
    assert result.exit_code == 0, result.output
    assert f"2 metric(s) of 2 run(s) written to {output}" in result.output
    assert png_size(output) == (1000, 360)  # loss and accuracy, 500 x 360 each, side by side
    from matplotlib.image import imread

    assert imread(str(output))[..., :3].std() > 0.05  # not a blank picture
    # Each run's colour is drawn (lines and legend), so both runs are on the picture.
    assert pixels_near(output, BLUE) > 50 and pixels_near(output, ORANGE) > 50


@needs_matplotlib
@pytest.mark.slow  # imports matplotlib or torch's SummaryWriter: seconds
def test_four_metrics_wrap_into_rows_of_three_and_metric_picks_panels(tmp_path):
    records = [{"step": s, "a": s, "b": -s, "c": s * s, "d": 1.0} for s in range(5)]
    folder = write_jsonl(tmp_path, "run", records)
    all_panels, two_panels = tmp_path / "all.png", tmp_path / "two.png"
    assert invoke(str(folder), "-o", str(all_panels)).exit_code == 0
    assert png_size(all_panels) == (1500, 720)
    result = invoke(str(folder), "-o", str(two_panels), "--metric", "c", "-m", "a")
    assert result.exit_code == 0, result.output
    assert "2 metric(s) of 1 run(s)" in result.output
    assert png_size(two_panels) == (1000, 360)
    assert pixels_near(two_panels, BLUE) > 50 and pixels_near(two_panels, ORANGE) == 0


@needs_matplotlib
@needs_tensorboard
@pytest.mark.slow  # imports matplotlib or torch's SummaryWriter: seconds
def test_a_tensorboard_run_and_a_jsonl_run_are_drawn_together(tmp_path):
    write_tensorboard(tmp_path / "tb" / "run")
    jsonl = write_jsonl(tmp_path / "js", "run", training_records(1.0))
    output = tmp_path / "mixed.svg"
    result = invoke(str(tmp_path / "tb"), str(jsonl), "-o", str(output))
    assert result.exit_code == 0, result.output
    assert "4 metric(s) of 2 run(s)" in result.output  # loss, l1/train, l1/eval, accuracy
    assert output.read_text().lstrip().startswith("<?xml") and "tb/run" in output.read_text()


# Bad input: one line each, exit code 2 ---------------------------------------------------------


@needs_matplotlib
def test_a_missing_folder_is_one_line(tmp_path):
    missing = tmp_path / "nope"
    assert_one_line_error(invoke(str(missing), "-o", str(tmp_path / "p.png")), f"{missing}: no such folder")


@needs_matplotlib
def test_a_folder_without_logs_is_one_line(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    result = invoke(str(tmp_path / "empty"), "-o", str(tmp_path / "p.png"))
    assert_one_line_error(result, "empty: no metrics.jsonl or TensorBoard event files")
    assert not (tmp_path / "p.png").exists()


@needs_matplotlib
def test_a_corrupt_json_line_names_the_file_and_line(tmp_path):
    folder = write_jsonl(tmp_path, "run", training_records(1.0, steps=3))
    path = folder / "metrics.jsonl"
    path.write_text(path.read_text() + '{"step": 3, "values": {"loss": 0.\n')
    assert_one_line_error(invoke(str(folder), "-o", str(tmp_path / "p.png")), f"{path}:4: not valid JSON")


@needs_matplotlib
def test_a_record_still_being_written_is_left_out(tmp_path):
    folder = write_jsonl(tmp_path, "run", training_records(1.0, steps=3))
    path = folder / "metrics.jsonl"
    path.write_text(path.read_text() + '{"step": 3, "values": {"loss": 0.')  # no newline yet
    result = invoke(str(folder), "-o", str(tmp_path / "p.png"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").stat().st_size > 0


@needs_matplotlib
def test_a_line_that_is_not_a_tracker_record_names_the_file_and_line(tmp_path):
    folder = write_jsonl(tmp_path, "run", training_records(1.0, steps=2))
    path = folder / "metrics.jsonl"
    path.write_text("[1, 2]\n" + path.read_text())
    assert_one_line_error(invoke(str(folder), "-o", str(tmp_path / "p.png")), f"{path}:1: expected an object")


@needs_matplotlib
def test_logs_without_numbers_are_one_line(tmp_path):
    folder = write_jsonl(tmp_path, "run", [{"step": 0, "note": "text only"}])
    assert_one_line_error(invoke(str(folder), "-o", str(tmp_path / "p.png")), "no numeric values")


def test_missing_matplotlib_names_the_extra_to_install(tmp_path, monkeypatch):
    folder = write_jsonl(tmp_path, "run", training_records(1.0))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    result = invoke(str(folder), "-o", str(tmp_path / "p.png"))
    assert_one_line_error(
        result,
        "needs matplotlib",
        "from the repository root: "
        "pip install -c constraints.txt ./packages/accel-state './packages/accel-launch[plot]'",
    )


def test_an_output_folder_that_does_not_exist_is_one_line(tmp_path):
    folder = write_jsonl(tmp_path, "run", training_records(1.0))
    output = tmp_path / "no" / "such" / "p.png"
    assert_one_line_error(
        invoke(str(folder), "-o", str(output)), f"the folder {output.parent} does not exist"
    )


@needs_matplotlib
def test_an_unknown_metric_or_image_format_is_one_line(tmp_path):
    folder = write_jsonl(tmp_path, "run", training_records(1.0))
    result = invoke(str(folder), "-o", str(tmp_path / "p.png"), "-m", "los")
    assert_one_line_error(result, "no run has the metric 'los'; the runs have: loss, accuracy")
    assert_one_line_error(
        invoke(str(folder), "-o", str(tmp_path / "p.xyz")), "p.xyz: cannot write the picture"
    )


def test_run_dir_and_output_are_required():
    assert invoke().exit_code == 2
    assert "Missing option '-o'" in invoke("somewhere").output


@pytest.mark.slow
def test_the_cli_imports_neither_matplotlib_nor_tensorboard_for_help():
    code = (
        "import sys\n"
        "from accel_launch.commands.cli import accel\n"
        "accel.main(['plot', '--help'], prog_name='accel', standalone_mode=False)\n"
        "heavy = [m for m in ('matplotlib', 'tensorboard', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: accel plot [OPTIONS] RUN_DIR..." in result.stdout
