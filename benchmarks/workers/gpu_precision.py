"""A GPU block job: a transformer block trained in fp32, bf16 or fp16 on one CUDA device, by hand
(autocast, and a GradScaler for fp16) or through accel or Accelerate (`mixed_precision=`); each
block answers its steps/s and `torch.cuda.max_memory_allocated` so far. Its model and inputs are also
those of the GPU check's precision step (`benchmarks/workers/gpu_check_job.py`).

    python gpu_precision.py --contender raw|accel|accelerate --precision no|bf16|fp16 [--steps N]
        --connect HOST:PORT --job NAME
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from benchmarks.workers.serve import Task, add_arguments, serve

# The figure's shape: nine jobs of it hold about 38 GiB of a device at once (figures/precision.py).
WIDTH, TOKENS = 2048, 8192
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def block_model(width: int, device: str = "cuda") -> torch.nn.Module:
    layer = torch.nn.TransformerEncoderLayer(
        width, max(1, width // 128), dim_feedforward=4 * width, batch_first=True
    )
    return layer.to(device)


def inputs(
    width: int, tokens: int, device: str = "cuda", generator: torch.Generator | None = None
) -> torch.Tensor:
    """Return `tokens` tokens of `width` in sequences of up to 512 (drawn on the CPU from `generator`
    when one is given, so that every device sees the same numbers)."""
    shape = (max(1, tokens // 512), min(tokens, 512), width)
    if generator is None:
        return torch.randn(*shape, device=device)
    return torch.randn(*shape, generator=generator).to(device)


def raw_step(args: argparse.Namespace) -> Callable[[], None]:
    torch.manual_seed(0)
    model = block_model(args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None
    x = inputs(args.width, args.tokens)
    enabled = args.precision in DTYPES

    def step() -> None:
        with torch.autocast("cuda", dtype=DTYPES.get(args.precision, torch.float32), enabled=enabled):
            output = model(x)
        loss = output.float().pow(2).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()

    return step


def library_step(args: argparse.Namespace) -> Callable[[], None]:
    if args.contender == "accel":
        from accel import Accelerator
    else:
        from accelerate import Accelerator  # type: ignore[no-redef]
    accelerator = Accelerator(mixed_precision=args.precision)
    torch.manual_seed(0)
    model = block_model(args.width)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    x = inputs(args.width, args.tokens)

    def step() -> None:
        accelerator.backward(model(x).float().pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contender", choices=["raw", "accel", "accelerate"], required=True)
    parser.add_argument("--precision", choices=["no", "bf16", "fp16"], required=True)
    parser.add_argument("--steps", type=int, default=10, help="steps in one block")
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    add_arguments(parser)
    args = parser.parse_args()
    step = (raw_step if args.contender == "raw" else library_step)(args)

    def block() -> float:
        for _ in range(args.steps):
            step()
        return args.steps

    def peak() -> dict[str, float]:
        return {"max_memory_mb": torch.cuda.max_memory_allocated() / 2**20}

    serve(args, 0, {"step": Task(block, sync=torch.cuda.synchronize, extras=peak)}, lambda: None)


if __name__ == "__main__":
    main()
