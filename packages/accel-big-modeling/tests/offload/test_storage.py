"""The offload folder: what it writes, what it refuses, and reading it back memory-mapped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel_big_modeling import BigModelingError, OffloadedWeightsLoader, PrefixedDataset, offload_state_dict


def _state() -> dict[str, torch.Tensor]:
    return {
        "a.weight": torch.randn(3, 4),
        "a.bias": torch.randn(3).to(torch.bfloat16),
        "steps": torch.tensor(7),
    }


def test_round_trip_and_accelerate_index_format(tmp_path: Path) -> None:
    state = _state()
    offload_state_dict(tmp_path, state)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["a.weight"]["dtype"] == "float32" and index["a.weight"]["shape"] == [3, 4]
    assert Path(index["a.weight"]["safetensors_file"]).is_file()
    loader = OffloadedWeightsLoader(save_folder=tmp_path)
    assert sorted(loader) == sorted(state)
    for name, tensor in state.items():
        assert torch.equal(loader[name], tensor)


def test_accelerate_can_read_our_folder(tmp_path: Path) -> None:
    accelerate_utils = pytest.importorskip("accelerate.utils", reason="Accelerate is only a reference here")
    state = _state()
    offload_state_dict(tmp_path, state)
    theirs = accelerate_utils.OffloadedWeightsLoader(save_folder=str(tmp_path))
    assert torch.equal(theirs["a.weight"], state["a.weight"])


def test_we_can_read_accelerates_folder(tmp_path: Path) -> None:
    accelerate_utils = pytest.importorskip("accelerate.utils", reason="Accelerate is only a reference here")
    state = _state()
    accelerate_utils.offload_state_dict(str(tmp_path), state)
    loader = OffloadedWeightsLoader(save_folder=tmp_path)
    for name, tensor in state.items():
        assert torch.equal(loader[name], tensor), name


def test_state_dict_first_then_folder(tmp_path: Path) -> None:
    offload_state_dict(tmp_path, {"x": torch.zeros(2)})
    loader = OffloadedWeightsLoader(state_dict={"y": torch.ones(1)}, save_folder=tmp_path)
    assert set(loader) == {"x", "y"} and torch.equal(loader["y"], torch.ones(1))
    assert list(PrefixedDataset({"m.w": torch.ones(1), "n.w": torch.zeros(1)}, "m.")) == ["w"]


def test_a_foreign_index_json_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text('{"mine": true}')
    with pytest.raises(
        BigModelingError, match=f"offload folder {tmp_path} holds an index.json that accel did not"
    ):
        offload_state_dict(tmp_path, _state())
    assert (tmp_path / "index.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]


def test_foreign_files_stay_beside_ours(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "accel-offload-00001.safetensors").write_text("also mine, not accel's")
    state = _state()
    offload_state_dict(tmp_path, state)
    offload_state_dict(tmp_path, {"other": torch.ones(2)})  # a second write merges, never clobbers
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "accel-offload-00001.safetensors").read_text() == "also mine, not accel's"
    loader = OffloadedWeightsLoader(save_folder=tmp_path)
    assert torch.equal(loader["a.weight"], state["a.weight"])
    assert torch.equal(loader["other"], torch.ones(2))


def test_rewriting_a_weight_prunes_only_our_stale_shards(tmp_path: Path) -> None:
    offload_state_dict(tmp_path, {"w": torch.zeros(2)})
    offload_state_dict(tmp_path, {"w": torch.ones(2)})
    shards = sorted(p.name for p in tmp_path.glob("accel-offload-*.safetensors"))
    assert len(shards) == 1
    assert torch.equal(OffloadedWeightsLoader(save_folder=tmp_path)["w"], torch.ones(2))
