"""One contender's training job on one backend: each rank's peak resident memory above its start.

    <launcher> memory_job.py CONTENDER BACKEND --steps 2 --layers 16 --width 1024

Every job trains the same model (LAYERS Linear layers of width WIDTH, fp32) with AdamW for a few
steps, one thread per process, under glibc's fixed mmap threshold (set by the figure: see
`benchmarks.figures.memory`). BACKEND:
- ddp: raw `DistributedDataParallel` by hand; accel and accelerate: `Accelerator()` + `prepare`;
- fsdp (FSDP2): the model built on rank 0 and on the meta device elsewhere, then sharded and
  filled from rank 0. raw: `fully_shard` on every Linear and the root, then
  `set_model_state_dict(..., broadcast_from_rank0=True)`; accel: the FSDP plugin with
  `cpu_ram_efficient_loading=True`, which does the same;
- zero3: DeepSpeed ZeRO-3 (gloo, DeepSpeed's CPU accelerator). raw: `deepspeed.initialize` by
  hand; accel: `DeepSpeedPlugin(zero_stage=3)`.
Accelerate 1.15 runs neither FSDP nor DeepSpeed on CPU (both need an accelerator device), so the
figure starts it only for ddp. Peak: ru_maxrss after training minus ru_maxrss once the process
group is up, before the model is built. Rank 0 emits {"peaks_mb": [one per rank]}.
"""

from __future__ import annotations

import argparse
import resource
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.jobs import emit
from benchmarks.workers.job_exit import end_job

Step = Callable[[torch.Tensor], None]


def _peak_mb() -> float:
    """Return this process's peak resident set so far, in MB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _model(width: int, layers: int, device: str = "cpu") -> torch.nn.Module:
    with torch.device(device):
        torch.manual_seed(0)
        return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))


def _hand_step(model: Any, optimizer: torch.optim.Optimizer) -> Step:
    def step(x: torch.Tensor) -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _library_step(accelerator: Any, model: Any, optimizer: Any) -> Step:
    def step(x: torch.Tensor) -> None:
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()

    return step


def _deepspeed_without_shm_op() -> None:
    import deepspeed.comm.torch  # noqa: F401 - loaded to patch it before init_distributed runs

    # DeepSpeed compiles a shared-memory all-reduce op for CPU (20-80 s) that training never uses.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]


def raw(backend: str, width: int, layers: int, before: list[float]) -> Step:
    if backend == "zero3":
        _deepspeed_without_shm_op()
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    else:
        dist.init_process_group("gloo")
    before.append(_peak_mb())
    if backend == "ddp":
        model: Any = torch.nn.parallel.DistributedDataParallel(_model(width, layers))
    elif backend == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        from torch.distributed.fsdp import fully_shard

        model = _model(width, layers, "cpu" if dist.get_rank() == 0 else "meta")
        full = model.state_dict() if dist.get_rank() == 0 else {}
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        model.to_empty(device="cpu")
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, full, options=options)
        del full
    else:
        import deepspeed

        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": 3},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31 - 1,
        }
        module = _model(width, layers)
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
        engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)

        def step(x: torch.Tensor) -> None:
            engine.backward(engine(x).square().mean())
            engine.step()

        return step
    return _hand_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4))


def accel(backend: str, width: int, layers: int, before: list[float]) -> Step:
    from accel import Accelerator, FullyShardedDataParallelPlugin

    if backend == "fsdp":
        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=width * width, cpu_ram_efficient_loading=True
        )
        accelerator = Accelerator(fsdp_plugin=plugin)
    elif backend == "zero3":
        from accel import DeepSpeedPlugin  # accel[deepspeed]: only where ZeRO-3 is measured

        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))
    else:
        accelerator = Accelerator()
    before.append(_peak_mb())
    if backend == "zero3":  # DeepSpeed builds its engine from the model and optimizer at once
        module = _model(width, layers)
        model, optimizer = accelerator.prepare(module, torch.optim.AdamW(module.parameters(), lr=1e-4))
        return _library_step(accelerator, model, optimizer)
    # FSDP2 shards the parameters in prepare: the optimizer is built on the sharded ones.
    on_meta = backend == "fsdp" and not accelerator.is_main_process
    model = accelerator.prepare(_model(width, layers, "meta" if on_meta else "cpu"))
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    return _library_step(accelerator, model, optimizer)


def accelerate(backend: str, width: int, layers: int, before: list[float]) -> Step:
    from accelerate import Accelerator

    if backend != "ddp":
        raise SystemExit(f"memory_job: Accelerate runs no {backend} on CPU processes")
    accelerator = Accelerator()
    before.append(_peak_mb())
    model = accelerator.prepare(_model(width, layers))
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    return _library_step(accelerator, model, optimizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=("raw", "accel", "accelerate"))
    parser.add_argument("backend", choices=("ddp", "fsdp", "zero3"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    before: list[float] = []
    build = {"raw": raw, "accel": accel, "accelerate": accelerate}[args.contender]
    step = build(args.backend, args.width, args.layers, before)
    x = torch.randn(args.batch, args.width)
    for _ in range(args.steps):
        step(x)
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, _peak_mb() - before[0])
    if dist.get_rank() == 0:
        emit({"peaks_mb": peaks})
    dist.barrier()
    end_job(args.contender)


if __name__ == "__main__":
    main()
