"""Loading checkpoints: single files, folders, sharded safetensors and .bin, and each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accel_big_modeling import BigModelingError, init_empty_weights, load_checkpoint_in_model


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))


def _save_sharded(folder: Path, state: dict[str, torch.Tensor], kind: str) -> Path:
    names = list(state)
    weight_map = {}
    for index, chunk in enumerate((names[:2], names[2:])):
        part = {name: state[name].clone() for name in chunk}
        if kind == "safetensors":
            file = f"model-{index + 1:05d}-of-00002.safetensors"
            save_file(part, folder / file)
        else:
            file = f"pytorch_model-{index + 1:05d}-of-00002.bin"
            torch.save(part, folder / file)
        weight_map.update(dict.fromkeys(chunk, file))
    index_name = "model.safetensors.index.json" if kind == "safetensors" else "pytorch_model.bin.index.json"
    (folder / index_name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder / index_name


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
@pytest.mark.parametrize("point_at", ["index", "folder"])
def test_sharded_checkpoint_loads_into_a_meta_model(tmp_path: Path, kind: str, point_at: str) -> None:
    reference = _model()
    index = _save_sharded(tmp_path, reference.state_dict(), kind)
    with init_empty_weights():
        model = _model()
    load_checkpoint_in_model(model, index if point_at == "index" else tmp_path, device_map={"": "cpu"})
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    x = torch.randn(2, 4)
    assert torch.equal(model(x), reference(x))


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin", "weights.pt"])
def test_single_file_and_its_folder(tmp_path: Path, name: str) -> None:
    reference = _model()
    path = tmp_path / name
    if name.endswith(".safetensors"):
        save_file(reference.state_dict(), path)
    else:
        torch.save(reference.state_dict(), path)
    for checkpoint in (path, tmp_path):
        model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
        load_checkpoint_in_model(model, checkpoint)
        assert torch.equal(model[2].weight, reference[2].weight)


def test_loaded_weights_do_not_share_the_file(tmp_path: Path) -> None:
    reference = _model()
    save_file(reference.state_dict(), tmp_path / "model.safetensors")
    model = _model()
    load_checkpoint_in_model(model, tmp_path, device_map={"": "cpu"})
    (tmp_path / "model.safetensors").write_bytes(b"gone")
    assert torch.equal(model[0].weight, reference[0].weight)


def test_dtype_and_keep_in_fp32(tmp_path: Path) -> None:
    save_file(_model().state_dict(), tmp_path / "model.safetensors")
    with init_empty_weights():
        model = _model()
    load_checkpoint_in_model(
        model, tmp_path, device_map={"": "cpu"}, dtype="float16", keep_in_fp32_modules=["2"]
    )
    assert model[0].weight.dtype == torch.float16
    assert model[2].weight.dtype == torch.float32


def test_disk_weights_go_to_the_offload_folder(tmp_path: Path) -> None:
    reference = _model()
    _save_sharded(tmp_path, reference.state_dict(), "safetensors")
    with init_empty_weights():
        model = _model()
    offload = tmp_path / "offload"
    load_checkpoint_in_model(model, tmp_path, device_map={"0": "cpu", "2": "disk"}, offload_folder=offload)
    assert model[2].weight.is_meta and not model[0].weight.is_meta
    index = json.loads((offload / "index.json").read_text())
    assert set(index) == {"2.weight", "2.bias"}
    assert index["2.weight"]["shape"] == [3, 6]


def test_disk_without_offload_folder_is_refused(tmp_path: Path) -> None:
    save_file(_model().state_dict(), tmp_path / "model.safetensors")
    with pytest.raises(BigModelingError, match="pass offload_folder"):
        load_checkpoint_in_model(_model(), tmp_path, device_map={"0": "cpu", "2": "disk"})


def test_missing_key_warns_unless_strict(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = _model().state_dict()
    del state["2.bias"]
    save_file(state, tmp_path / "model.safetensors")
    model = _model()
    before = model[0].weight.clone()
    with pytest.raises(BigModelingError, match=r"missing keys '2\.bias'"):
        load_checkpoint_in_model(model, tmp_path, strict=True)
    assert torch.equal(model[0].weight, before)  # nothing replaced before the check
    with caplog.at_level("WARNING"):
        load_checkpoint_in_model(model, tmp_path)
    assert "'2.bias'" in caplog.text


def test_unexpected_key_is_an_error_when_strict(tmp_path: Path) -> None:
    state = {**_model().state_dict(), "extra.weight": torch.zeros(2)}
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(BigModelingError, match=r"unexpected keys 'extra\.weight'"):
        load_checkpoint_in_model(_model(), tmp_path, strict=True)


def test_wrong_shape_names_key_and_shapes_and_changes_nothing(tmp_path: Path) -> None:
    state = _model().state_dict()
    state["2.weight"] = torch.zeros(5, 6)
    _save_sharded(tmp_path, state, "safetensors")
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        BigModelingError,
        match=r"'2\.weight' in model-00002-of-00002.safetensors has shape \(5, 6\), "
        r"the model expects \(3, 6\)",
    ):
        load_checkpoint_in_model(model, tmp_path, device_map={"": "cpu"})
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize("damage", ["truncate", "garbage_header", "empty"])
def test_corrupt_safetensors_shard_is_named(tmp_path: Path, damage: str) -> None:
    _save_sharded(tmp_path, _model().state_dict(), "safetensors")
    shard = tmp_path / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(
        {"truncate": data[:-10], "garbage_header": data[:8] + b"{nope" + data[13:], "empty": b""}[damage]
    )
    with pytest.raises(BigModelingError, match="model-00002-of-00002.safetensors") as error:
        load_checkpoint_in_model(_model(), tmp_path)
    assert "\n" not in str(error.value)


def test_corrupt_bin_shard_is_named(tmp_path: Path) -> None:
    _save_sharded(tmp_path, _model().state_dict(), "bin")
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"not a torch file")
    with pytest.raises(
        BigModelingError, match=r"corrupt checkpoint shard .*pytorch_model-00001-of-00002\.bin"
    ):
        load_checkpoint_in_model(_model(), tmp_path)


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    _save_sharded(tmp_path, _model().state_dict(), "safetensors")
    (tmp_path / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(
        BigModelingError, match="lists shard model-00001-of-00002.safetensors, which does not exist"
    ):
        load_checkpoint_in_model(_model(), tmp_path)


def test_tied_weights_load_from_one_key(tmp_path: Path) -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 4)
            self.head = nn.Linear(4, 5, bias=False)
            self.head.weight = self.embed.weight

    reference = Tied()
    save_file({"embed.weight": reference.embed.weight.detach().clone()}, tmp_path / "model.safetensors")
    with init_empty_weights():
        model = Tied()
    load_checkpoint_in_model(model, tmp_path, device_map={"": "cpu"}, strict=True)
    assert model.head.weight is model.embed.weight
    assert torch.equal(model.head.weight, reference.embed.weight)
