"""`accel merge-weights` on the checkpoint a 2-process FSDP2 job (gloo, CPU) saved with SHARDED_STATE_DICT:
the merged file holds exactly the model's full state dict that the job gathered itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def train_and_save_sharded(folder: str) -> dict:
    """Train a few FSDP2 steps, save_state with SHARDED_STATE_DICT; return the full state dict (rank 0)."""
    from accel import Accelerator, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(
        state_dict_type="SHARDED_STATE_DICT",
        auto_wrap_policy="TRANSFORMER_BASED_WRAP",
        transformer_cls_names_to_wrap=["Linear"],
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(accelerator.process_index)
    for _ in range(3):
        loss = model(torch.randn(8, 4, generator=generator)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.save_state(folder)
    full = accelerator.get_state_dict(model)
    return {key: value.clone() for key, value in full.items()} if accelerator.is_main_process else {}


def test_merge_weights_merges_what_a_2_process_fsdp2_job_saved(tmp_path):
    from safetensors.torch import load_file

    checkpoint = tmp_path / "checkpoint"
    expected = run_on_ranks(train_and_save_sharded, 2, str(checkpoint))[0]
    shards = sorted(p.name for p in (checkpoint / "pytorch_model_fsdp").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"], "each rank wrote its own shard"

    accel = [sys.executable, "-c", "from accel_launch.commands.cli import main; main()", "merge-weights"]
    out = tmp_path / "merged"
    result = subprocess.run([*accel, str(checkpoint), str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "holds the model folder pytorch_model_fsdp; merging it" in result.stdout
    merged = load_file(out / "model.safetensors")
    assert sorted(merged) == sorted(expected)
    for key, tensor in expected.items():
        assert merged[key].dtype == tensor.dtype and torch.equal(merged[key], tensor), key

    again = subprocess.run([*accel, str(checkpoint), str(out)], capture_output=True, text=True, timeout=120)
    assert again.returncode != 0
    assert again.stderr.strip() == (
        f"accel merge-weights: {Path(out) / 'model.safetensors'} exists; pass --overwrite to replace it"
    )
