"""content_digest: equal across a save/load round trip, different after any change to what a file holds."""

from __future__ import annotations

import collections

import pytest
import torch
from safetensors.torch import load_file, save_file

from accel.checkpointing.content_digest import content_digest

LARGE = 300_000  # elements: beyond the small-tensor path, several blocks of 4096 words


def _state() -> dict:
    generator = torch.Generator().manual_seed(0)
    big = torch.randn(LARGE, generator=generator)
    return {
        "state": {
            0: {"step": torch.tensor(3.0), "exp_avg": big, "exp_avg_sq": big.square()},
            1: {"bf16": torch.randn(1001, generator=generator).bfloat16(), "mask": torch.rand(77) > 0.5},
        },
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "name": None}],
        "odd": torch.arange(13, dtype=torch.uint8),
        "big_odd": torch.arange(LARGE * 4 + 5, dtype=torch.int64).to(torch.uint8),
        "strided": torch.randn(400, 300, generator=generator).t(),
        "offset_view": torch.randn(LARGE + 1, generator=generator)[1:],
    }


def test_equal_after_torch_save_and_load(tmp_path):
    state = _state()
    torch.save(state, tmp_path / "s.pt")
    loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    assert content_digest(loaded) == content_digest(state)


def test_equal_after_safetensors_round_trip_whatever_the_key_order(tmp_path):
    tensors = {"b": torch.randn(LARGE), "a": torch.randn(10).half(), "c": torch.zeros(3, dtype=torch.bool)}
    save_file(tensors, tmp_path / "s.safetensors")
    loaded = load_file(tmp_path / "s.safetensors")
    assert content_digest(loaded) == content_digest(tensors)
    assert content_digest(collections.OrderedDict(reversed(list(tensors.items())))) == content_digest(tensors)


@pytest.mark.parametrize("position", [0, 1, 4095, 4096 * 8 + 3, LARGE * 4 // 2, LARGE * 4 - 1])
def test_any_flipped_bit_changes_it(position):
    state = _state()
    before = content_digest(state)
    raw = state["state"][0]["exp_avg"].view(torch.uint8)
    raw[position] ^= 0x01
    assert content_digest(state) != before


def test_swapped_or_zeroed_blocks_and_changed_values_change_it():
    state = _state()
    before = content_digest(state)
    big = state["state"][0]["exp_avg"]
    first, second = big[:8192].clone(), big[8192:16384].clone()
    big[:8192], big[8192:16384] = second, first  # two 32 KiB blocks swapped: same plain sum
    assert content_digest(state) != before
    big[:8192], big[8192:16384] = first, second
    assert content_digest(state) == before
    big[:1024] = 0
    assert content_digest(state) != before

    for change in (
        lambda s: s["param_groups"][0].update(lr=2e-3),
        lambda s: s["param_groups"][0].update(betas=[0.9, 0.999]),  # a list is not a tuple
        lambda s: s["state"][1].update(bf16=s["state"][1]["bf16"].float()),  # same values, other dtype
        lambda s: s.update(odd=s["odd"].reshape(1, 13)),  # same bytes, other shape
        lambda s: s["odd"].__setitem__(12, 0),  # the last, unaligned byte
        lambda s: s["big_odd"].__setitem__(-1, 0),
    ):
        state = _state()
        change(state)
        assert content_digest(state) != before


def test_two_words_swapped_inside_one_block_change_it():
    """Block sums (the v1 digest) cannot see this: the words of one 32 KiB block in another order."""
    state = _state()
    before = content_digest(state)
    words = state["state"][0]["exp_avg"].view(torch.int64)
    words[[5, 1000]] = words[[1000, 5]].clone()
    assert content_digest(state) != before


def test_empty_bf16_and_strided_tensors():
    empty = [torch.zeros(0), torch.zeros(0, 3), torch.zeros(0, dtype=torch.int8)]
    assert len({content_digest(t) for t in empty}) == 3  # the shape and dtype count, not only the bytes
    matrix = torch.randn(300, 200)
    assert content_digest(matrix.t()) == content_digest(matrix.t().contiguous())  # row-major bytes
    assert content_digest(matrix.t()) != content_digest(matrix)
    half = torch.randn(5000).bfloat16()
    assert content_digest(half) == content_digest(half.clone())
    changed = half.clone()
    changed.view(torch.int16)[17] ^= 1
    assert content_digest(changed) != content_digest(half)


def test_each_tensor_has_its_own_digest_and_threads_change_nothing(monkeypatch):
    import accel.checkpointing.content_digest as module

    state = _state()
    parallel = module.digest_of(state)
    monkeypatch.setattr(module, "_PARALLEL_BYTES", 1 << 62)
    serial = module.digest_of(state)
    assert parallel == serial
    assert {"state.0.exp_avg", "state.1.bf16", "odd", "param_groups"} & set(serial.tensors) == {
        "state.0.exp_avg", "state.1.bf16", "odd",
    }  # fmt: skip
    state["state"][0]["exp_avg"][7] += 1
    changed = module.digest_of(state)
    assert [p for p in serial.tensors if serial.tensors[p] != changed.tensors[p]] == ["state.0.exp_avg"]


def test_older_digests_are_computed_as_they_were():
    """DIGEST_V2 hashed dtype, shape and bytes in one xxh3-128; today's digest differs from it."""
    import xxhash

    from accel.checkpointing.content_digest import DIGEST_V2, digest_of

    tensor = torch.arange(10, dtype=torch.float32)
    v2 = xxhash.xxh3_128(b"torch.float32(10,):" + tensor.numpy().tobytes()).hexdigest()
    assert digest_of({"t": tensor}, algorithm=DIGEST_V2).tensors == {"t": v2}
    assert digest_of({"t": tensor}).tensors != {"t": v2}
