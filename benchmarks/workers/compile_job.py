"""One process of the compile figure: a transformer encoder trained eager, fully compiled or compiled
by region (inductor by default), through one contender; time to the first step and steps/s after warm-up.

    python compile_job.py --contender raw|accel|accelerate --variant eager|full|regional
        [--backend inductor] [--device cpu|cuda] --blocks 12 --width 256 --heads 4 --sequence 128 --batch 4
        --warmup 3 --steps 10

- raw: the loop by hand; `torch.compile(model)` (full) or `torch.compile(layer)` in place of each
  encoder layer (regional, torch's recipe);
- accel / accelerate: `Accelerator(cpu=True, dynamo_plugin=TorchDynamoPlugin(backend=...,
  use_regional_compilation=...))` and `prepare`, which compiles (`cpu=True` left out with `--device
  cuda`, the GPU check's compile step: the clocks then wait for the device).
Inductor's cache folder comes from the environment (TORCHINDUCTOR_CACHE_DIR and
ACCEL_COMPILE_CACHE_DIR, set alike by the figure). The clock starts once the libraries are imported
and the model is built, and stops after the first optimizer step: preparing and compiling count.
After warm-up the steps are timed in chunks that alternate with the same number of steps of an eager
twin by hand (a copy of the model as built, its own AdamW) in the same process, so the speed relative
to eager is a paired ratio that the machine's drift between processes does not enter.
Emits {"first_step_s": s, "steps_per_s": steps/s after warm-up, "eager_steps_per_s": the twin's,
"graphs": graphs dynamo compiled}.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.utils

from benchmarks.jobs import emit
from benchmarks.workers.job_exit import end_job

Backward = Callable[[torch.Tensor], None]


def make_encoder(blocks: int, width: int, heads: int) -> torch.nn.Module:
    """Return the training figures' encoder (4 x d=256 there) with `blocks` layers."""
    layer = torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, batch_first=True)
    return torch.nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)


def _raw(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, variant: str, backend: str
) -> tuple[Any, Any, Backward]:
    if variant == "full":
        model = torch.compile(model, backend=backend)  # type: ignore[assignment]
    elif variant == "regional":
        # Not `layer.compile()`: on a module whose forward is torch's own it compiles nothing.
        layers = model.layers  # type: ignore[union-attr]
        model.layers = torch.nn.ModuleList(torch.compile(layer, backend=backend) for layer in layers)
    return model, optimizer, lambda loss: loss.backward()


def _library(
    contender: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, variant: str, backend: str,
    on_cpu: bool,
) -> tuple[Any, Any, Backward]:  # fmt: skip
    if contender == "accel":
        from accel import Accelerator
        from accel.utils import TorchDynamoPlugin
    else:
        from accelerate import Accelerator  # type: ignore[no-redef]
        from accelerate.utils import TorchDynamoPlugin  # type: ignore[no-redef]
    if variant == "eager":
        accelerator = Accelerator(cpu=on_cpu)
    else:
        plugin = TorchDynamoPlugin(backend=backend, use_regional_compilation=variant == "regional")
        accelerator = Accelerator(cpu=on_cpu, dynamo_plugin=plugin)
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer, accelerator.backward


def _import(contender: str) -> None:
    """Import the contender's library before the clock starts (import cost is the startup figure's)."""
    if contender == "accel":
        import accel  # noqa: F401
        import accel.utils  # noqa: F401
    elif contender == "accelerate":
        import accelerate  # noqa: F401
        import accelerate.utils  # noqa: F401


def _alternate(
    step: Callable[[int], None], twin_step: Callable[[int], None], steps: int, chunks: int,
    synchronize: Callable[[], None],
) -> tuple[float, float]:  # fmt: skip
    """Run `steps` steps of each in `chunks` alternating chunks (who goes first alternates too);
    return the seconds each took in all."""
    seconds = [0.0, 0.0]
    sizes = [steps // chunks + (1 if chunk < steps % chunks else 0) for chunk in range(chunks)]
    for chunk, size in enumerate(sizes):
        order = ((0, step), (1, twin_step)) if chunk % 2 == 0 else ((1, twin_step), (0, step))
        for side, run in order:
            synchronize()
            started = time.perf_counter()
            for index in range(size):
                run(index)
            synchronize()
            seconds[side] += time.perf_counter() - started
    return seconds[0], seconds[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contender", choices=["raw", "accel", "accelerate"], required=True)
    parser.add_argument("--variant", choices=["eager", "full", "regional"], required=True)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=4, help="alternations with the eager twin")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _import(args.contender)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = make_encoder(args.blocks, args.width, args.heads).to(device)
    shape = (args.batch, args.sequence, args.width)
    batches = [torch.randn(*shape).to(device) for _ in range(2)]
    target = torch.randn(*shape).to(device)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    twin = copy.deepcopy(model)
    twin_optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    started = time.perf_counter()
    if args.contender == "raw":
        model, optimizer, backward = _raw(model, optimizer, args.variant, args.backend)
    else:
        model, optimizer, backward = _library(
            args.contender, model, optimizer, args.variant, args.backend, device.type == "cpu"
        )

    def step(index: int) -> None:
        loss = torch.nn.functional.mse_loss(model(batches[index % 2]), target)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    def twin_step(index: int) -> None:
        loss = torch.nn.functional.mse_loss(twin(batches[index % 2]), target)
        loss.backward()
        twin_optimizer.step()
        twin_optimizer.zero_grad()

    step(0)
    synchronize()
    first_step = time.perf_counter() - started
    for index in range(args.warmup):
        step(index + 1)
        twin_step(index)
    seconds = _alternate(step, twin_step, args.steps, args.chunks, synchronize)
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    emit(
        {
            "first_step_s": first_step,
            "steps_per_s": args.steps / seconds[0],
            "eager_steps_per_s": args.steps / seconds[1],
            "graphs": graphs,
        }
    )
    end_job(args.contender)


if __name__ == "__main__":
    main()
