"""The GPU check's one-shot jobs (`benchmarks/gpu_check.py` starts them; rank 0 answers once through
`benchmarks.jobs.emit`). `--device cpu` runs the same code on the CPU, for the check's dry run.

    python gpu_check_job.py environment
    python gpu_check_job.py precision --precision no|bf16|fp16 [--device cuda] [--steps N] [--warmup N]
        [--width W] [--tokens T]
    <launcher> gpu_check_job.py device [--library accel|accelerate] [--device cuda]
    python gpu_check_job.py sharding --mode ddp|fsdp2|nd [--device cuda] [--steps N] [--width W]
        [--blocks B] [--rows R]

- environment: torch's version, the CUDA devices it sees, and whether accel imports (and why not);
- precision: gpu_precision.py's transformer block trained by hand (autocast; torch.amp.GradScaler for
  fp16) and then through `Accelerator(mixed_precision=...)`, from the same seed on the same data;
  answers each loop's losses and steps/s.
- device: what `Accelerator()` picked in the world its launcher started (device, distributed type,
  process group backend); `--library accelerate` answers Accelerate's, for reference.
- sharding: one lone process trains nd_job.py's residual MLP as raw `DistributedDataParallel` in a
  world of one (ddp), through accel's FSDP2 plugin (fsdp2), or through a `ParallelismConfig` of
  ones with that plugin (nd: a 4-D mesh of size 1); answers losses, steps/s and the peak of
  `torch.cuda.max_memory_allocated` (None on the CPU).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.jobs import emit
from benchmarks.launchers import free_port
from benchmarks.workers.gpu_precision import DTYPES, block_model, inputs
from benchmarks.workers.job_exit import end_job
from benchmarks.workers.nd_job import Net

Step = Callable[[], torch.Tensor]
# A sharding job's parts: the model, its optimizer, how to run backward, and what it is, in words.
Built = tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[torch.Tensor], None], str]
SEED = 0


def timed_losses(step: Step, steps: int, warmup: int, device: torch.device) -> dict[str, Any]:
    """Run `warmup` then `steps` steps; return every step's loss and the timed steps' rate.

    Both loops of a comparison re-seed here, so that dropout draws the same masks in each."""
    torch.manual_seed(SEED)
    losses = [step().detach() for _ in range(warmup)]
    synchronize(device)
    started = time.perf_counter()
    losses += [step().detach() for _ in range(steps)]
    synchronize(device)
    seconds = time.perf_counter() - started
    return {"losses": torch.stack(losses).float().tolist(), "steps_per_s": steps / seconds}


def device_of(args: argparse.Namespace) -> torch.device:
    """Return the device to run on, with its index (what `torch.cuda.set_device` needs)."""
    return torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


# environment -------------------------------------------------------------------------------------
def environment(args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_count": torch.cuda.device_count(),
    }
    if found["device_count"]:
        found["device_name"] = torch.cuda.get_device_name(0)
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        found["bf16_supported"] = torch.cuda.is_bf16_supported()
    try:
        import accel

        found["accel"] = accel.__version__
    except Exception as error:  # noqa: BLE001 - what fails is the answer
        found["accel_error"] = f"{type(error).__name__}: {error}"
    return found


# precision ---------------------------------------------------------------------------------------
def precision_data(args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED + 1)
    x = inputs(args.width, args.tokens, str(device), generator)
    return x, torch.randn(x.shape, generator=generator).to(device)


def raw_precision_step(args: argparse.Namespace, device: torch.device) -> Step:
    """The loop by hand: autocast to the low dtype, a GradScaler for fp16."""
    torch.manual_seed(SEED)
    model = block_model(args.width, str(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None
    low = args.precision in DTYPES
    x, y = precision_data(args, device)

    def step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=DTYPES.get(args.precision, torch.float32), enabled=low):
            output = model(x)
        loss = torch.nn.functional.mse_loss(output.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        return loss

    return step


def accel_precision_step(args: argparse.Namespace, device: torch.device) -> tuple[Step, Any]:
    """The same loop through `Accelerator(mixed_precision=...)`; returns it and the accelerator."""
    from accel import Accelerator

    accelerator = Accelerator(mixed_precision=args.precision, cpu=device.type == "cpu")
    torch.manual_seed(SEED)
    model = block_model(args.width, "cpu")
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    x, y = precision_data(args, accelerator.device)

    def step() -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step, accelerator


def precision(args: argparse.Namespace) -> dict[str, Any]:
    device = device_of(args)
    raw = timed_losses(raw_precision_step(args, device), args.steps, args.warmup, device)
    raw["max_memory_mb"] = peak_memory_mb(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step, accelerator = accel_precision_step(args, device)
    ours = timed_losses(step, args.steps, args.warmup, device)
    ours["max_memory_mb"] = peak_memory_mb(device)
    return {
        "precision": args.precision,
        "device": str(accelerator.device),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "raw": raw,
        "accel": ours,
    }


# device ------------------------------------------------------------------------------------------
def device_report(args: argparse.Namespace) -> dict[str, Any]:
    import torch.distributed as dist

    if args.library == "accel":
        from accel import Accelerator
    else:
        from accelerate import Accelerator  # type: ignore[no-redef]
    accelerator = Accelerator(cpu=args.device == "cpu")
    joined = dist.is_available() and dist.is_initialized()
    return {
        "library": args.library,
        "device": accelerator.device.type,
        "distributed_type": str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type)),
        "num_processes": accelerator.num_processes,
        "process_group": dist.get_backend() if joined else None,
        "world_size": dist.get_world_size() if joined else None,
    }


# sharding ----------------------------------------------------------------------------------------
def raw_ddp(args: argparse.Namespace, device: torch.device) -> Built:
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    init = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group(backend, init_method=init, rank=0, world_size=1)
    torch.manual_seed(SEED)
    model = Net(args.width, args.blocks).to(device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    return ddp, optimizer, torch.Tensor.backward, f"raw DistributedDataParallel, {backend}, world of 1"


def accel_sharded(args: argparse.Namespace, device: torch.device) -> Built:
    from accel import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Block"]
    )
    config = None
    if args.mode == "nd":
        config = ParallelismConfig(dp_replicate_size=1, dp_shard_size=1, tp_size=1, cp_size=1)
    accelerator = Accelerator(cpu=device.type == "cpu", fsdp_plugin=plugin, parallelism_config=config)
    torch.manual_seed(SEED)
    model = accelerator.prepare(Net(args.width, args.blocks))
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    mesh = getattr(accelerator, "torch_device_mesh", None)
    shape = "" if mesh is None else f", mesh {dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=True))}"
    return model, optimizer, accelerator.backward, f"accel {accelerator.distributed_type.value}{shape}"


def sharding(args: argparse.Namespace) -> dict[str, Any]:
    device = device_of(args)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model, optimizer, backward, what = (raw_ddp if args.mode == "ddp" else accel_sharded)(args, device)
    placed = next(model.parameters()).device
    generator = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(args.rows, args.width, generator=generator).to(placed)

    def step() -> torch.Tensor:
        loss = model(x).square().mean()
        backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return loss

    result = timed_losses(step, args.steps, args.warmup, device)
    return {
        "mode": args.mode,
        "what": what,
        "wrapper": type(model).__name__,
        **result,
        "max_memory_mb": peak_memory_mb(device),
    }


JOBS = {"environment": environment, "precision": precision, "device": device_report, "sharding": sharding}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    jobs = parser.add_subparsers(dest="job", required=True)
    jobs.add_parser("environment")
    one = jobs.add_parser("precision")
    one.add_argument("--precision", choices=["no", "bf16", "fp16"], required=True)
    one.add_argument("--width", type=int, default=2048)
    one.add_argument("--tokens", type=int, default=8192)
    two = jobs.add_parser("device")
    two.add_argument("--library", choices=["accel", "accelerate"], default="accel")
    three = jobs.add_parser("sharding")
    three.add_argument("--mode", choices=["ddp", "fsdp2", "nd"], required=True)
    three.add_argument("--width", type=int, default=2048)
    three.add_argument("--blocks", type=int, default=8)
    three.add_argument("--rows", type=int, default=4096)
    for sub in (one, two, three):
        sub.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
        sub.add_argument("--steps", type=int, default=20, help="timed steps")
        sub.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    emit(JOBS[args.job](args))
    # Raw and Accelerate jobs leave their process group by hand; accel tears its own down at exit.
    raw = args.job == "sharding" and args.mode == "ddp"
    end_job("raw" if raw else "accelerate" if getattr(args, "library", None) == "accelerate" else "accel")


if __name__ == "__main__":
    main()
