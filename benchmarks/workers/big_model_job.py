"""One contender of the big-model figure, in one fresh process: load a sharded checkpoint, run forwards.

    python big_model_job.py prepare DIR --blocks 48 --width 1024 --shards 8
    python big_model_job.py measure CONTENDER DIR --blocks 48 --width 1024 --cpu_budget 50331648

The model is BLOCKS blocks of Linear WIDTH x WIDTH (fp32), as the memory-budget scenario of
accel-big-modeling's tests. `prepare` writes it as SHARDS safetensors shards with an index, and an
input batch with the full model's output. `measure` loads and runs it:
- raw: the model built in memory, every shard read with `safetensors.torch.load_file` and copied
  in with `load_state_dict`: everything resident, the baseline;
- accel / accelerate: `init_empty_weights`, then `load_checkpoint_and_dispatch(device_map="auto",
  max_memory={"cpu": CPU_BUDGET}, no_split_module_classes=["Block"], offload_folder=...)`: what fits
  the budget on the CPU, the rest offloaded to disk.
Peak memory is sampled (RssAnon and VmRSS from /proc/self/status, every 2 ms and after every block)
from just before the load to the end of the first forward; the timed forwards follow, unsampled.
Emits {"load_s", "forward_s" (mean of FORWARDS), "anon_mb", "rss_mb" (peak growth above the start),
"model_mb", "equal" (the output equals the full model's), "cpu_entries", "disk_entries"}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from benchmarks.jobs import emit

FORWARDS = 3
BATCH = 4
MB = 2**20


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Stack(nn.Module):
    def __init__(self, blocks: int, width: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def memory() -> tuple[int, int]:
    """Return this process's (RssAnon, VmRSS) in bytes."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":", 1)[0]
            if key in ("RssAnon", "VmRSS"):
                found[key] = int(line.split()[1]) * 1024
    return found["RssAnon"], found["VmRSS"]


class PeakSampler:
    """The highest RssAnon and VmRSS seen, sampled by a thread and by whoever calls `sample`."""

    def __init__(self) -> None:
        self.anon, self.rss = memory()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self, *_: Any) -> None:
        anon, rss = memory()
        self.anon, self.rss = max(self.anon, anon), max(self.rss, rss)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def prepare(folder: Path, blocks: int, width: int, shards: int) -> None:
    torch.manual_seed(0)
    model = Stack(blocks, width)
    state = model.state_dict()
    names = list(state)
    per_shard = -(-len(names) // shards)
    weight_map = {}
    for shard in range(shards):
        file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: state[name] for name in names[shard * per_shard : (shard + 1) * per_shard]}
        save_file(part, folder / file)
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    x = torch.randn(BATCH, width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.save({"x": x, "y": model(x)}, folder / "io.pt")
    emit({"bytes": sum(t.numel() * t.element_size() for t in state.values())})


def load_raw(folder: Path, blocks: int, width: int) -> nn.Module:
    """The full model in memory: built, then each shard read and copied in."""
    model = Stack(blocks, width)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        state.update(load_file(shard))
    model.load_state_dict(state)
    del state
    return model


def load_dispatched(
    contender: str, folder: Path, blocks: int, width: int, budget: int, offload: Path
) -> nn.Module:
    if contender == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    else:
        from accel import init_empty_weights, load_checkpoint_and_dispatch
    with init_empty_weights():
        model = Stack(blocks, width)
    return load_checkpoint_and_dispatch(
        model,
        str(folder / "model.safetensors.index.json"),
        device_map="auto",
        max_memory={"cpu": budget},
        no_split_module_classes=["Block"],
        offload_folder=str(offload),
    )


def measure(contender: str, folder: Path, blocks: int, width: int, budget: int) -> None:
    torch.set_num_threads(1)
    if contender == "accelerate":
        import accelerate  # noqa: F401 - imported before the baseline, as accel is below
    elif contender == "accel":
        import accel  # noqa: F401
    io = torch.load(folder / "io.pt", weights_only=True)
    offload = folder / f"offload-{contender}"
    shutil.rmtree(offload, ignore_errors=True)
    start_anon, start_rss = memory()
    try:
        with PeakSampler() as peak:
            started = time.perf_counter()
            if contender == "raw":
                model = load_raw(folder, blocks, width)
            else:
                model = load_dispatched(contender, folder, blocks, width, budget, offload)
            load_s = time.perf_counter() - started
            hooks = [block.register_forward_hook(peak.sample) for block in model.blocks]
            with torch.no_grad():
                y = model(io["x"])
            for hook in hooks:
                hook.remove()
        with torch.no_grad():
            started = time.perf_counter()
            for _ in range(FORWARDS):
                model(io["x"])
            forward_s = (time.perf_counter() - started) / FORWARDS
        peak.sample()
        places = list(getattr(model, "hf_device_map", {"": "cpu"}).values())
    finally:
        shutil.rmtree(offload, ignore_errors=True)
    emit(
        {
            "load_s": load_s,
            "forward_s": forward_s,
            "anon_mb": (peak.anon - start_anon) / MB,
            "rss_mb": (peak.rss - start_rss) / MB,
            "model_mb": blocks * (width * width + width) * 4 / MB,
            "equal": bool(torch.equal(y, io["y"])),
            "cpu_entries": places.count("cpu"),
            "disk_entries": places.count("disk"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare", "measure"))
    parser.add_argument("rest", nargs="+", help="prepare: DIR; measure: CONTENDER DIR")
    parser.add_argument("--blocks", type=int, default=48)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--cpu_budget", type=int, default=48 * MB, help="bytes of max_memory's cpu entry")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(Path(args.rest[0]), args.blocks, args.width, args.shards)
    else:
        contender, folder = args.rest
        measure(contender, Path(folder), args.blocks, args.width, args.cpu_budget)


if __name__ == "__main__":
    main()
