"""A tiny Llama from transformers, dispatched over cpu and disk, generates the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accel_big_modeling import (
    compute_module_sizes,
    infer_auto_device_map,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)


@pytest.mark.slow
def test_tiny_llama_generates_the_same_tokens_with_cpu_and_disk_offload(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers", reason="the Llama check needs transformers")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path / "ckpt", max_shard_size="40KB")  # sharded safetensors with an index
    assert (tmp_path / "ckpt" / "model.safetensors.index.json").is_file()
    prompt = torch.tensor([[1, 5, 9, 17, 33]])
    expected = reference.generate(prompt, max_new_tokens=8, do_sample=False)

    with init_empty_weights():
        model = transformers.LlamaForCausalLM(config).eval()
    model.tie_weights()
    budget = {"cpu": compute_module_sizes(model)[""] // 2}
    device_map = infer_auto_device_map(
        model, max_memory=budget, no_split_module_classes=["LlamaDecoderLayer"]
    )
    assert "disk" in device_map.values() and "cpu" in device_map.values()
    model = load_checkpoint_and_dispatch(
        model,
        tmp_path / "ckpt",
        device_map=device_map,
        offload_folder=tmp_path / "offload",
    )
    assert model.model.layers[-1].self_attn.q_proj.weight.is_meta
    assert torch.equal(model.generate(prompt, max_new_tokens=8, do_sample=False), expected)
