"""StreamedFile: a torch file's storages hashed while torch.load reads them give the same content
digest as hashing the loaded object, for every kind of tensor; a load that fails leaves no hash running."""

from __future__ import annotations

import pytest
import torch

from accel.checkpointing.content_digest import DIGEST_V2, content_digest, digest_of
from accel.checkpointing.streamed_digests import STREAMED_BYTES, StreamedFile

LARGE = 300_000  # float32 elements: 1.2 MB, beyond one chunk and above STREAMED_BYTES


def _state() -> dict:
    generator = torch.Generator().manual_seed(0)
    big = torch.randn(LARGE, generator=generator)
    shared = torch.randn(LARGE, generator=generator)
    return {
        "state": {
            0: {"step": torch.tensor(3.0), "exp_avg": big, "exp_avg_sq": big.square()},
            1: {"bf16": torch.randn(LARGE, generator=generator).bfloat16(), "mask": torch.rand(LARGE) > 0.5},
        },
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1]}],
        "small": torch.arange(13, dtype=torch.uint8),
        "strided": torch.randn(400, 300, generator=generator).t(),
        "offset_view": shared[1:],
        "same_storage": shared,
        "int64": torch.arange(LARGE, dtype=torch.int64),
    }


def test_streamed_digests_give_the_content_digest_of_what_was_saved(tmp_path):
    state = _state()
    torch.save(state, tmp_path / "s.pt")
    with StreamedFile(tmp_path / "s.pt") as file:
        loaded = torch.load(file, weights_only=True)
    known = file.bytes_digest
    streamed = [name for name, t in _tensors(loaded) if known(t) is not None]
    # Whole storages of at least STREAMED_BYTES were hashed as they were read; views were not.
    assert set(streamed) == {
        "state.0.exp_avg",
        "state.0.exp_avg_sq",
        "state.1.bf16",
        "state.1.mask",
        "int64",
        "same_storage",
    }
    assert all(
        t.numel() * t.element_size() >= STREAMED_BYTES for name, t in _tensors(loaded) if name in streamed
    )
    assert digest_of(loaded, known) == digest_of(state)
    assert digest_of(loaded, known).whole == content_digest(state)


def test_a_changed_storage_changes_the_streamed_digest(tmp_path):
    state = _state()
    expected = digest_of(state)
    torch.save(state, tmp_path / "s.pt")
    data = bytearray((tmp_path / "s.pt").read_bytes())
    needle = state["int64"][1000:1008].numpy().tobytes()
    at = data.index(needle)
    data[at : at + 8], data[at + 8 : at + 16] = data[at + 8 : at + 16], data[at : at + 8]  # two words swapped
    (tmp_path / "s.pt").write_bytes(bytes(data))
    with StreamedFile(tmp_path / "s.pt") as file:
        loaded = torch.load(file, weights_only=True)
    found = digest_of(loaded, file.bytes_digest)
    assert found.whole != expected.whole
    assert [p for p in found.tensors if found.tensors[p] != expected.tensors[p]] == ["int64"]


def test_a_load_that_fails_leaves_no_hash_running(tmp_path):
    torch.save(_state(), tmp_path / "s.pt")
    data = (tmp_path / "s.pt").read_bytes()
    (tmp_path / "s.pt").write_bytes(data[: len(data) - 200])  # the zip directory is gone
    with pytest.raises(Exception), StreamedFile(tmp_path / "s.pt") as file:  # noqa: B017, PT011
        torch.load(file, weights_only=True)
    assert file.closed and not file._pending


def test_older_digests_are_computed_as_they_were():
    """DIGEST_V2 hashed dtype, shape and bytes in one xxh3-128; today's digest differs from it."""
    import xxhash

    tensor = torch.arange(10, dtype=torch.float32)
    v2 = xxhash.xxh3_128(b"torch.float32(10,):" + tensor.numpy().tobytes()).hexdigest()
    assert digest_of({"t": tensor}, algorithm=DIGEST_V2).tensors == {"t": v2}
    assert digest_of({"t": tensor}).tensors != {"t": v2}


def _tensors(obj, path=()):
    if isinstance(obj, torch.Tensor):
        yield ".".join(map(str, path)), obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, (*path, key))
    elif isinstance(obj, list | tuple):
        for index, value in enumerate(obj):
            yield from _tensors(value, (*path, index))
