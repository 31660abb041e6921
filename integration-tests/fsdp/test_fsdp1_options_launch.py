"""Accelerate's FSDP1-era plugin arguments on 2 real CPU processes (gloo), run on FSDP2.

The first job is Accelerate's examples/by_feature/fsdp_with_peak_mem_tracking.py plugin, exactly as
that example builds it, under `accel launch --use_fsdp`; the others check that each sharding
strategy keeps its meaning (and DDP's numbers) and that ignored modules stay whole.
"""

from __future__ import annotations

import json

import pytest
import torch

from accel_launch.testing.ranks import launch_script, run_on_ranks

pytestmark = pytest.mark.slow

FSDP_ENV = {"ACCEL_DISTRIBUTED_TYPE": "FSDP"}
FP32_TOLERANCE = 1e-5

# The plugin and the loop of Accelerate's fsdp_with_peak_mem_tracking example (its model and data
# need the network: a small model and random data stand in), then a save_state of the run.
PEAK_MEMORY_EXAMPLE = """\
import json, os, sys
import torch
from torch.distributed.fsdp.fully_sharded_data_parallel import FullOptimStateDictConfig, FullStateDictConfig
from accel import Accelerator, DistributedType, FullyShardedDataParallelPlugin

fsdp_plugin = FullyShardedDataParallelPlugin(
    state_dict_config=FullStateDictConfig(offload_to_cpu=False, rank0_only=False),
    optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=False),
)
accelerator = Accelerator(fsdp_plugin=fsdp_plugin)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.AdamW(params=model.parameters(), lr=2e-5, weight_decay=2e-4)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=10)
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
before = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
accelerator.save_state(sys.argv[1])
after = accelerator.get_state_dict(model)
# One write per line: print() writes the newline separately, and the ranks share one pipe.
os.write(sys.stdout.fileno(), ("REPORT " + json.dumps({
    "rank": accelerator.process_index,
    "type": accelerator.distributed_type.value,
    "state_dict_type": accelerator.fsdp_plugin.state_dict_type,
    "keys": sorted(after),
    "moved": max(float((after[k] - before[k]).abs().max()) for k in after),
    "devices": sorted({str(v.device) for v in after.values()}),
}) + "\\n").encode())
"""


def test_accelerates_peak_memory_example_plugin_trains_and_saves_on_fsdp2(tmp_path):
    script = tmp_path / "fsdp_with_peak_mem_tracking.py"
    script.write_text(PEAK_MEMORY_EXAMPLE)
    result = launch_script(script, 2, [tmp_path / "checkpoint"], launch_args=["--use_fsdp"], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    reports = sorted((json.loads(line.removeprefix("REPORT ")) for line in lines), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1], result.stdout
    for report in reports:  # rank0_only=False: every rank holds the full state dict
        assert report["type"] == "FSDP" and report["state_dict_type"] == "FULL_STATE_DICT"
        assert report["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert report["moved"] > 0.0, "the optimizer must step the sharded weights"
        assert report["devices"] == ["cpu"]
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()
    assert (tmp_path / "checkpoint" / "optimizer_fsdp.bin").is_file()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 16)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)])
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = x + torch.tanh(block(x))
        return self.head(x)


def train(plugin_kwargs: dict | None) -> dict:
    """Train Net 2 epochs (AdamW, batch 4 per rank); return the full weights and, per parameter,
    the numel this rank holds."""
    from accel import Accelerator, FullyShardedDataParallelPlugin
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()
    plugin = FullyShardedDataParallelPlugin(**plugin_kwargs) if plugin_kwargs is not None else None
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(2):
        for inputs, targets in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()
    local = {}
    for name, parameter in accelerator.unwrap_model(model).named_parameters():
        to_local = getattr(parameter, "to_local", None)
        local[name] = (to_local() if to_local is not None else parameter).numel()
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    return {"weights": weights, "local": local, "type": accelerator.distributed_type.value}


def train_each(configs: list[dict | None]) -> list[dict]:
    return [train(config) for config in configs]


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((torch.tensor(a[k]) - torch.tensor(b[k])).abs().max()) for k in a)


def test_each_sharding_strategy_keeps_ddps_numbers_and_its_meaning():
    native = run_on_ranks(train_each, 2, [None])[0][0]
    assert native["type"] == "MULTI_CPU"
    strategies = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
    per_rank = run_on_ranks(train_each, 2, [{"sharding_strategy": s} for s in strategies], env=FSDP_ENV)
    full_numel = {"embed.weight": 64, "blocks.0.weight": 256}
    for strategy, result in zip(strategies, per_rank[0], strict=True):
        assert result["type"] == "FSDP", strategy
        assert _max_difference(result["weights"], native["weights"]) <= FP32_TOLERANCE, strategy
        held = {name: result["local"][name] for name in full_numel}
        if strategy == "NO_SHARD":
            assert held == full_numel, "NO_SHARD: every rank keeps whole parameters"
        else:  # one node of 2 processes: HYBRID_SHARD shards within it
            assert held == {name: n // 2 for name, n in full_numel.items()}, strategy


def test_ignored_modules_stay_whole_on_every_rank():
    per_rank = run_on_ranks(train_each, 2, [{"ignored_modules": r"blocks\.\d"}], env=FSDP_ENV)
    for rank in (0, 1):
        local = per_rank[rank][0]["local"]
        assert local["blocks.0.weight"] == 256 and local["blocks.1.weight"] == 256, "ignored: not sharded"
        assert local["embed.weight"] == 32, "the others are sharded"
