"""`accel merge-weights`: a real sharded (DCP) checkpoint, laid out as the FSDP2 backend's save_state
lays it out, merged into safetensors / torch files and compared tensor by tensor; refusals are one line.

The checkpoints are written by `torch.distributed.checkpoint.save` from this one process (no process
group); integration-tests/test_merge_weights_launch.py merges one that a 2-process FSDP2 job saved.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from accel_launch.checkpoints import merge as merge_module
from accel_launch.checkpoints.errors import MergeError
from accel_launch.commands.cli import accel


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
    model[2].to(torch.bfloat16)  # a second dtype
    with torch.no_grad():
        model[0].bias[0] = float("nan")  # compared bit for bit, so a NaN still compares equal
    return model


def _save_dcp(state: dict[str, torch.Tensor], folder: Path) -> Path:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ...": one process on purpose
        dcp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


@pytest.fixture
def checkpoint(tmp_path) -> tuple[Path, dict[str, torch.Tensor]]:
    """A save_state folder holding one model's DCP folder (and an optimizer's, and other files)."""
    state = {k: v.clone() for k, v in _model().state_dict().items()}
    folder = tmp_path / "checkpoint_0"
    _save_dcp(state, folder / "pytorch_model_fsdp")
    _save_dcp({"state.0.weight.exp_avg": torch.ones(2)}, folder / "optimizer_fsdp")
    (folder / "checkpoint.json").write_text("{}")
    return folder, state


def _run(*args: str | Path):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(accel, ["merge-weights", *map(str, args)])


def _refused(*args: str | Path) -> str:
    result = _run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("accel merge-weights: ")
    return lines[0]


def _assert_same(found: dict, expected: dict[str, torch.Tensor]) -> None:
    assert sorted(found) == sorted(expected)
    for key, tensor in expected.items():
        assert found[key].dtype == tensor.dtype and found[key].shape == tensor.shape, key
        assert torch.equal(torch.nan_to_num(found[key].float()), torch.nan_to_num(tensor.float())), key
        assert torch.isnan(found[key].float()).equal(torch.isnan(tensor.float())), key


def test_a_save_state_folder_merges_its_model_into_model_safetensors(checkpoint, tmp_path):
    from safetensors.torch import load_file

    folder, state = checkpoint
    result = _run(folder, tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert f"{folder} holds the model folder pytorch_model_fsdp; merging it" in result.stdout
    assert "read back equal" in result.stdout
    assert sorted(p.name for p in (tmp_path / "merged").iterdir()) == ["model.safetensors"]
    _assert_same(load_file(tmp_path / "merged" / "model.safetensors"), state)
    assert (folder / "pytorch_model_fsdp" / ".metadata").is_file(), "kept without --remove_checkpoint_dir"


@pytest.mark.parametrize("name", ["pytorch_model_fsdp", "pytorch_model_fsdp_0"])
def test_a_model_folder_named_directly_merges(tmp_path, name):
    from safetensors.torch import load_file

    state = _model().state_dict()
    source = _save_dcp(state, tmp_path / "run" / name)
    result = _run(source, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "holds the model folder" not in result.stdout
    _assert_same(load_file(tmp_path / "out" / "model.safetensors"), state)


def test_an_existing_output_is_refused_and_replaced_with_overwrite(checkpoint, tmp_path):
    from safetensors.torch import load_file

    folder, state = checkpoint
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"an earlier merge")
    (out / "config.json").write_text("{}")
    line = _refused(folder, out)
    assert line == f"accel merge-weights: {out / 'model.safetensors'} exists; pass --overwrite to replace it"
    assert (out / "model.safetensors").read_bytes() == b"an earlier merge"
    result = _run(folder, out, "--overwrite")
    assert result.exit_code == 0, result.output
    _assert_same(load_file(out / "model.safetensors"), state)
    assert (out / "config.json").read_text() == "{}", "files the merge does not write are left alone"
    assert not [p for p in out.iterdir() if ".partial" in p.name]


def test_a_model_above_max_shard_size_is_written_as_shards_and_an_index(checkpoint, tmp_path):
    from safetensors.torch import load_file

    folder, state = checkpoint
    out = tmp_path / "out"
    result = _run(folder, out, "--max_shard_size", "200")
    assert result.exit_code == 0, result.output
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(shards) > 1 and set(index["weight_map"].values()) == set(shards)
    assert all(name.endswith(f"-of-{len(shards):05d}.safetensors") for name in shards)
    merged = {k: v for name in shards for k, v in load_file(out / name).items()}
    _assert_same(merged, state)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state.values())
    # Merged again as one file: the earlier shards and index go with --overwrite.
    assert _refused(folder, out).endswith("exists; pass --overwrite to replace it")
    assert _run(folder, out, "--overwrite").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_unsafe_serialization_writes_a_bin_that_loads_weights_only(checkpoint, tmp_path):
    folder, state = checkpoint
    result = _run(folder, tmp_path / "out", "--unsafe_serialization")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pytorch_model.bin"]
    _assert_same(torch.load(tmp_path / "out" / "pytorch_model.bin", weights_only=True), state)


def test_remove_checkpoint_dir_removes_the_model_folder_after_the_output_read_back_equal(
    checkpoint, tmp_path
):
    folder, _ = checkpoint
    result = _run(folder, tmp_path / "out", "--remove_checkpoint_dir")
    assert result.exit_code == 0, result.output
    assert f"removed {folder / 'pytorch_model_fsdp'}" in result.stdout
    assert not (folder / "pytorch_model_fsdp").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.json", "optimizer_fsdp"], (
        "only the merged model's DCP folder goes"
    )


def test_remove_checkpoint_dir_keeps_the_checkpoint_when_the_read_back_differs(
    checkpoint, tmp_path, monkeypatch
):
    folder, _ = checkpoint
    real_write = merge_module.write_partials

    def write_then_damage(files, progress):  # noqa: ANN001, ANN202 - a stand-in for a write that went wrong
        partials = real_write(files, progress)
        (name,) = files.shards
        damaged = {k: v.clone() for k, v in files.shards[name].items()}
        damaged["0.weight"][0, 0] += 1
        from safetensors.torch import save_file

        save_file(damaged, str(partials[name]))
        return partials

    monkeypatch.setattr(merge_module, "write_partials", write_then_damage)
    line = _refused(folder, tmp_path / "out", "--remove_checkpoint_dir")
    assert "weight '0.weight' read back differs from the checkpoint's" in line
    assert sorted(p.name for p in (folder / "pytorch_model_fsdp").iterdir()) == [".metadata", "__0_0.distcp"]
    assert list((tmp_path / "out").iterdir()) == [], "nothing half-written is left"


def test_remove_checkpoint_dir_leaves_files_it_did_not_write(tmp_path):
    source = _save_dcp(_model().state_dict(), tmp_path / "pytorch_model_fsdp")
    (source / "notes.txt").write_text("mine")
    result = _run(source, tmp_path / "out", "--remove_checkpoint_dir")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in source.iterdir()) == ["notes.txt"]
    assert "left the folder (notes.txt)" in result.stdout


def test_missing_and_corrupt_checkpoints_are_one_line_naming_the_file(checkpoint, tmp_path):
    folder, _ = checkpoint
    model = folder / "pytorch_model_fsdp"
    out = tmp_path / "out"
    assert _refused(tmp_path / "nowhere", out).endswith(f"{tmp_path / 'nowhere'}: no such checkpoint folder")
    assert "holds neither .metadata" in _refused(tmp_path, out)
    assert "an optimizer's checkpoint" in _refused(folder / "optimizer_fsdp", out)

    data = model / "__0_0.distcp"
    original = data.read_bytes()
    data.write_bytes(original[:40])
    assert _refused(folder, out).startswith(f"accel merge-weights: {data}: truncated (40 bytes")
    data.write_bytes(b"\0" * len(original))
    assert _refused(folder, out).startswith(f"accel merge-weights: {data}: corrupt (")
    data.unlink()
    assert (
        _refused(folder, out) == f"accel merge-weights: {data}: missing (the checkpoint's .metadata lists it)"
    )

    (model / ".metadata").write_bytes(b"not a pickle")
    assert _refused(folder, out).startswith(
        f"accel merge-weights: {model / '.metadata'}: not a readable checkpoint metadata file"
    )
    (model / ".metadata").unlink()
    assert "holds neither .metadata" in _refused(model, out)
    assert not out.exists(), "nothing is written for a checkpoint that cannot be read"


def test_a_save_state_folder_of_several_models_asks_for_one(checkpoint, tmp_path):
    folder, _ = checkpoint
    _save_dcp({"w": torch.ones(3)}, folder / "pytorch_model_fsdp_1")
    line = _refused(folder, tmp_path / "out")
    assert "holds 2 models (pytorch_model_fsdp, pytorch_model_fsdp_1); merge one at a time" in line
    assert _run(folder / "pytorch_model_fsdp_1", tmp_path / "out").exit_code == 0


def test_an_output_that_is_a_file_and_a_bad_shard_size_are_refused(checkpoint, tmp_path):
    folder, _ = checkpoint
    (tmp_path / "file").write_text("x")
    assert "a file, not a folder" in _refused(folder, tmp_path / "file")
    assert "--max_shard_size must be a positive size" in _refused(
        folder, tmp_path / "o", "--max_shard_size", "lots"
    )


def test_merge_weights_returns_what_it_did(checkpoint, tmp_path):
    folder, state = checkpoint
    result = merge_module.merge_weights(folder, tmp_path / "out", safe_serialization=False)
    assert result.source.path == folder / "pytorch_model_fsdp" and result.source.found_in == folder
    assert result.tensors == len(state) and result.written == [tmp_path / "out" / "pytorch_model.bin"]
    with pytest.raises(MergeError, match="exists; pass --overwrite"):
        merge_module.merge_weights(folder, tmp_path / "out", safe_serialization=False)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_merge_on_a_terminal_shows_the_bytes_read_written_and_checked(checkpoint, tmp_path, monkeypatch):
    pytest.importorskip("tqdm", reason="the progress bar is tqdm's: not installed here")
    from accel_launch.checkpoints import progress

    made: list[progress.Progress] = []

    class Recorded(progress.Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    for module in ("dcp_folder", "merge"):
        monkeypatch.setattr(f"accel_launch.checkpoints.{module}.Progress", Recorded)
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    folder, state = checkpoint
    result = merge_module.merge_weights(folder, tmp_path / "out", max_shard_size=400)
    assert len(result.written) > 2, "several shards, so the bar moves more than once"
    read, written = made
    assert read.what == "merge-weights: reading" and written.what == "merge-weights: writing and checking"
    data_bytes = sum(p.stat().st_size for p in (folder / "pytorch_model_fsdp").glob("*.distcp"))
    assert result.total_bytes <= read.done_bytes <= data_bytes
    assert written.done_bytes == 2 * result.total_bytes
    assert not read.shown and not written.shown, "closed once done"
    assert "merge-weights: reading" in terminal.getvalue()
    monkeypatch.setenv("ACCEL_PROGRESS", "0")
    quiet = _Terminal()
    monkeypatch.setattr("sys.stderr", quiet)
    merge_module.merge_weights(folder, tmp_path / "again")
    assert quiet.getvalue() == ""
