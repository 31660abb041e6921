"""Forward+backward speed of a transformer block in fp32, bf16 and fp16 through accel's precision policies.

Runs on the GPU when there is one (width 4096 by default there; target on a Hopper GPU: bf16 >= 2x
fp32), else on the CPU (width 256). Prints steps/s per mode and the speed-up over fp32.

    python benchmarks/precision.py [--width W] [--steps N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

from accel_amp import precision_policy


def block(width: int, device: torch.device) -> torch.nn.Module:
    heads = max(1, width // 128)
    layer = torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, batch_first=True)
    return layer.to(device)


def steps_per_second(mode: str, width: int, tokens: int, steps: int, device: torch.device) -> float:
    torch.manual_seed(0)
    model = block(width, device)
    policy = precision_policy(mode, device)
    policy.wrap_forward(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(max(1, tokens // 512), min(tokens, 512), width, device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = model(x).float().pow(2).mean()
        policy.scale_loss(loss).backward()
        if policy.scaler is not None:
            policy.scaler.step(optimizer)
            policy.scaler.update()
        else:
            optimizer.step()

    for _ in range(3):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=None, help="tokens per step (batch x sequence)")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    width = args.width or (4096 if on_gpu else 256)
    tokens = args.tokens or (8192 if on_gpu else 512)
    steps = args.steps or (20 if on_gpu else 10)
    name = torch.cuda.get_device_name(device) if on_gpu else "CPU"
    print(f"transformer block, width {width}, {tokens} tokens per step, on {name}")
    results = {mode: steps_per_second(mode, width, tokens, steps, device) for mode in ("no", "bf16", "fp16")}
    for mode, speed in results.items():
        label = "fp32" if mode == "no" else mode
        print(f"{label:>5}: {speed:8.2f} steps/s  speed-up over fp32: {speed / results['no']:.2f}x")


if __name__ == "__main__":
    main()
