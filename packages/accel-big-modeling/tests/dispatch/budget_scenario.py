"""The 192 MiB memory-budget scenario, run in fresh processes by test_memory_budget.py.

`prepare DIR`: writes 8 safetensors shards with an index and the full model's output.
`measure DIR LIBRARY`: loads and dispatches (cpu 48MiB, rest on disk) with LIBRARY ("accel" or
"accelerate"), runs the forward, and prints one JSON line: peak RssAnon growth, the device map's
counts and whether the output equals the full model's.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import torch
from torch import nn

BLOCKS, WIDTH, SHARDS = 48, 1024, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def rss_anon() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def prepare(folder: Path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = Stack()
    state = model.state_dict()
    names = list(state)
    per_shard = len(names) // SHARDS
    weight_map = {}
    for shard in range(SHARDS):
        file = f"model-{shard + 1:05d}-of-{SHARDS:05d}.safetensors"
        part = {name: state[name] for name in names[shard * per_shard : (shard + 1) * per_shard]}
        save_file(part, folder / file)
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.save({"x": x, "y": model(x)}, folder / "io.pt")


def measure(folder: Path, library: str) -> None:
    if library == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    else:
        from accel_big_modeling import init_empty_weights, load_checkpoint_and_dispatch
    io = torch.load(folder / "io.pt", weights_only=True)
    with init_empty_weights():
        model = Stack()
    peak = [0]
    running = [True]

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], rss_anon())
            time.sleep(0.0005)

    def after_block(module: nn.Module, args: object, output: object) -> None:
        peak[0] = max(peak[0], rss_anon())

    for block in model.blocks:
        block.register_forward_hook(after_block)
    baseline = rss_anon()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    model = load_checkpoint_and_dispatch(
        model,
        str(folder / "model.safetensors.index.json"),
        device_map="auto",
        max_memory={"cpu": "48MiB"},
        no_split_module_classes=["Block"],
        offload_folder=str(folder / "offload"),
    )
    with torch.no_grad():
        y = model(io["x"])
    running[0] = False
    sampler.join()
    peak[0] = max(peak[0], rss_anon())
    devices = list(model.hf_device_map.values())
    print(
        json.dumps(
            {
                "growth_mib": (peak[0] - baseline) / 2**20,
                "model_mib": BLOCKS * (WIDTH * WIDTH + WIDTH) * 4 / 2**20,
                "cpu_entries": devices.count("cpu"),
                "disk_entries": devices.count("disk"),
                "equal": bool(torch.equal(y, io["y"])),
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]))
    else:
        measure(Path(sys.argv[2]), sys.argv[3])
