"""Big-model inference on a real CUDA device: an automatic map that splits the model between the GPU
and the CPU keeps the GPU's budget and gives the CPU model's outputs, and CPU offload runs each
layer on the GPU while the weights stay off it. Skipped, with the reason, where there is no GPU."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accel_big_modeling import cpu_offload, init_empty_weights, load_checkpoint_and_dispatch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none is visible)")

WIDTH, LAYERS = 512, 8
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4  # one fp32 Linear's weight and bias


def stack() -> nn.Sequential:
    return nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(LAYERS))).eval()


@pytest.fixture
def model_and_input() -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(0)
    return stack(), torch.randn(16, WIDTH)


def allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def test_auto_map_splits_between_gpu_and_cpu_within_the_gpus_budget(model_and_input, tmp_path: Path) -> None:
    model, x = model_and_input
    expected = model(x)
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    with init_empty_weights():
        empty = stack()
    budget = 3 * LAYER_BYTES + LAYER_BYTES // 2  # room for three layers, not four
    before = allocated()
    load_checkpoint_and_dispatch(
        empty, tmp_path / "model.safetensors", device_map="auto", max_memory={0: budget, "cpu": 10**9}
    )
    placed = set(empty.hf_device_map.values())
    assert 0 in placed and "cpu" in placed, empty.hf_device_map
    assert allocated() - before <= budget
    with torch.no_grad():
        output = empty(x.cuda())
    assert torch.allclose(output.cpu(), expected, atol=1e-5), (output.cpu() - expected).abs().max()


def test_cpu_offload_computes_on_the_gpu_and_keeps_the_weights_off_it(model_and_input) -> None:
    model, x = model_and_input
    expected = model(x)
    offloaded = cpu_offload(copy.deepcopy(model), execution_device=0)
    before = allocated()
    with torch.no_grad():
        output = offloaded(x.cuda())
    assert output.is_cuda
    assert torch.allclose(output.cpu(), expected, atol=1e-5)
    del output
    # Each layer's weights were brought to the GPU for its forward and let go after it.
    assert allocated() - before < LAYER_BYTES
