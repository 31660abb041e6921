"""A checkpoint file changed after saving is refused by load_state, naming the file and the tensor,
whatever the change: words reordered inside one 32 KiB block, whole blocks swapped, one bit
flipped, a file cut short or its tensors reordered; and nothing of the live objects changes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from accel import Accelerator, set_seed
from accel.checkpointing import load_state, save_state
from accel.checkpointing.content_digest import content_digest
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.format import METADATA_NAME

BLOCK = 32 * 1024  # bytes: the block over which the old digest summed 8-byte words


def _setup():
    accelerator = Accelerator()
    set_seed(0)
    # "1.weight": 256 x 256 float32, 256 KiB, eight blocks of 32 KiB
    model = torch.nn.Sequential(torch.nn.Linear(4, 256), torch.nn.Linear(256, 256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _live(model, optimizer):
    return content_digest([model.state_dict(), optimizer.state_dict()])


def _tensor_bytes_range(path: Path, key: str) -> tuple[int, int]:
    """Return where tensor `key`'s bytes lie in safetensors file `path` (its header is kept as is)."""
    data = path.read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_size])
    begin, end = header[key]["data_offsets"]
    start = 8 + header_size
    return start + begin, start + end


def _rewrite(path: Path, change) -> None:
    data = bytearray(path.read_bytes())
    change(data)
    path.write_bytes(bytes(data))


def _swap(data: bytearray, first: int, second: int, size: int) -> None:
    a, b = bytes(data[first : first + size]), bytes(data[second : second + size])
    data[first : first + size], data[second : second + size] = b, a


def _saved(tmp_path):
    accelerator, model, optimizer = _setup()
    folder = Path(save_state(accelerator, tmp_path / "c"))
    with torch.no_grad():  # the live objects differ from the saved ones: a load would change them
        accelerator.unwrap_model(model)[1].weight.add_(1.0)
    return accelerator, model, optimizer, folder


@pytest.mark.parametrize(
    "how",
    [
        "two words inside one block",  # the change the old digest (block sums) let through
        "two whole blocks",
        "one bit",
    ],
)
def test_a_changed_tensor_in_model_safetensors_is_refused_naming_file_and_key(tmp_path, how):
    accelerator, model, optimizer, folder = _saved(tmp_path)
    path = folder / "model.safetensors"
    start, end = _tensor_bytes_range(path, "1.weight")
    assert end - start == 256 * 256 * 4
    block = start + 3 * BLOCK  # the fourth block of the tensor

    def change(data: bytearray) -> None:
        if how == "two words inside one block":
            _swap(data, block + 8 * 5, block + 8 * 1000, 8)
        elif how == "two whole blocks":
            _swap(data, start + BLOCK, start + 5 * BLOCK, BLOCK)
        else:
            data[block + 12345] ^= 0x04

    before_file = path.read_bytes()
    _rewrite(path, change)
    assert path.read_bytes() != before_file and len(path.read_bytes()) == len(before_file)
    before = _live(model, optimizer)
    with pytest.raises(CheckpointError) as caught:
        load_state(accelerator, folder)
    message = str(caught.value)
    assert f"{path} is corrupt: tensor '1.weight' differs from what was saved" in message
    assert "\n" not in message
    assert _live(model, optimizer) == before


def test_two_words_swapped_in_an_optimizer_tensor_are_refused(tmp_path):
    accelerator, model, optimizer = _setup()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()  # AdamW state: exp_avg, exp_avg_sq of each parameter
    folder = Path(save_state(accelerator, tmp_path / "c"))
    path = folder / "optimizer.bin"
    exp_avg = optimizer.state_dict()["state"][2]["exp_avg"]  # 1.weight's, 256 KiB
    raw = path.read_bytes()
    needle = exp_avg.reshape(-1)[:64].numpy().tobytes()
    offset = raw.index(needle)  # the tensor's bytes, stored uncompressed in the zip

    def change(data: bytearray) -> None:
        _swap(data, offset + 8 * 2, offset + 8 * 3000, 8)

    _rewrite(path, change)
    before = _live(model, optimizer)
    with pytest.raises(
        CheckpointError, match=r"optimizer\.bin is corrupt: tensor 'state\.2\.exp_avg' differs"
    ):
        load_state(accelerator, folder)
    assert _live(model, optimizer) == before


def test_a_truncated_or_reordered_file_is_refused(tmp_path):
    accelerator, model, optimizer, folder = _saved(tmp_path)
    path = folder / "model.safetensors"
    intact = path.read_bytes()
    before = _live(model, optimizer)

    path.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated or corrupt"):
        load_state(accelerator, folder)
    assert _live(model, optimizer) == before

    # The same bytes in another order, the file's size and header unchanged: the tensor's halves swapped.
    start, end = _tensor_bytes_range(path, "1.weight")
    middle = (start + end) // 2
    path.write_bytes(intact[:start] + intact[middle:end] + intact[start:middle] + intact[end:])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupt: tensor '1\.weight' differs"):
        load_state(accelerator, folder)
    assert _live(model, optimizer) == before

    path.write_bytes(intact)
    load_state(accelerator, folder)  # intact again: it loads
    assert _live(model, optimizer) != before


def test_a_checkpoint_of_the_v2_digest_is_still_checked(tmp_path):
    """Checkpoints saved before the bytes' digest was hashed on its own record accel-content-v2."""
    from accel.checkpointing.content_digest import DIGEST_V2, digest_of
    from accel.checkpointing.reader import FolderReader

    accelerator, model, optimizer, folder = _saved(tmp_path)
    meta = json.loads((folder / METADATA_NAME).read_text())
    meta["content_digest"] = DIGEST_V2
    reader = FolderReader(folder)
    for name, entry in meta["files"].items():
        if "content" in entry:
            digest = digest_of(reader._load(name), algorithm=DIGEST_V2)
            entry["content"], entry["tensors"] = digest.whole, digest.tensors
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    before = _live(model, optimizer)
    load_state(accelerator, folder)  # v2 digests match: it loads
    assert _live(model, optimizer) != before

    meta["files"]["model.safetensors"]["tensors"]["0.1.weight"] = "0" * 32
    meta["files"]["model.safetensors"]["content"] = "0" * 32
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupt: tensor '1\.weight' differs"):
        load_state(accelerator, folder)


def test_a_checkpoint_of_the_previous_digest_is_still_checked(tmp_path):
    """A format 2 checkpoint records accel-content-v1 digests: checked with that algorithm."""
    from accel.checkpointing.content_digest_v1 import content_digest_v1

    accelerator, model, optimizer, folder = _saved(tmp_path)
    meta = json.loads((folder / METADATA_NAME).read_text())
    meta["format_version"], meta["content_digest"] = 2, "accel-content-v1"
    from accel.checkpointing.reader import FolderReader

    reader = FolderReader(folder)
    for name, entry in meta["files"].items():
        if "content" in entry:
            entry.pop("tensors")
            entry["content"] = content_digest_v1(reader._load(name))
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    load_state(accelerator, folder)  # v1 digests match: it loads

    meta["files"]["optimizer.bin"]["content"] = "0" * 64
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"optimizer\.bin is corrupt: .*accel-content-v1 digest"):
        load_state(accelerator, folder)

    meta["content_digest"] = "accel-content-v9"
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"records its files' digests as 'accel-content-v9'"):
        load_state(accelerator, folder)
