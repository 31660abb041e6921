"""Peak resident memory per rank: the native DDP backend vs FSDP2, on 2 and 4 CPU processes.

Every job trains the same model (about 200 MB of fp32 parameters: LAYERS Linear layers of width
WIDTH) with AdamW for a few steps through `Accelerator`, started by `accel launch --cpu`. Under DDP
each rank holds the whole model, its gradients and AdamW's two moments (about 4x the parameters);
under FSDP each rank holds 1/N of them plus the layers it gathers for the moment, so its peak must
fall as processes are added. Models are built on the main process only and on the meta device
elsewhere under FSDP (`cpu_ram_efficient_loading`), as one would for a model that fits a rank once.

Both run with glibc's mmap threshold fixed at 64 KiB (`MALLOC_MMAP_THRESHOLD_`): by default glibc
raises it to the largest block freed, after which freed gradient and communication buffers stay in
the heap and the resident set keeps every buffer the job ever held (measured here: a raw FSDP2 loop
on gloo then peaks at DDP's size). With the fixed threshold a freed buffer leaves the process, so
the peak is what training needed at once.

Prints each rank's peak resident set (ru_maxrss) minus what the process held before building the
model, the mean over ranks, and the ratios FSDP/DDP and FSDP at 4 / FSDP at 2.

    python benchmarks/fsdp_memory.py [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

WIDTH, LAYERS, BATCH = 2048, 12, 8  # 12 * (2048 * 2048 + 2048) * 4 bytes = 201 MB
MODES = ("ddp", "fsdp")
PROCESS_COUNTS = (2, 4)
MARK = "FSDP_MEMORY "


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def worker(mode: str, steps: int) -> None:
    import torch

    from accel import Accelerator, FullyShardedDataParallelPlugin
    from accel_state import PartialState, gather_object

    torch.set_num_threads(1)
    fsdp = mode == "fsdp"
    plugin = (
        FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=1_000_000,
                                       cpu_ram_efficient_loading=True)
        if fsdp
        else None
    )  # fmt: skip
    accelerator = Accelerator(fsdp_plugin=plugin)
    before = _peak_mb()
    on_meta = fsdp and not PartialState().is_main_process
    with torch.device("meta" if on_meta else "cpu"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    x = torch.randn(BATCH, WIDTH)
    for _ in range(steps):
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    peaks = gather_object([_peak_mb() - before])
    if accelerator.is_main_process:
        print(
            MARK + json.dumps({"mode": mode, "processes": accelerator.num_processes, "peaks": peaks}),
            flush=True,
        )


def run_job(mode: str, processes: int, steps: int) -> list[float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    env.pop("ACCEL_DEBUG_MODE", None)
    command = [
        sys.executable, "-m", "accel_launch.cli", "launch", "--cpu", "--num_processes", str(processes),
        __file__, "--worker", mode, "--steps", str(steps),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return [float(peak) for peak in json.loads(line[len(MARK) :])["peaks"]]
    sys.exit(f"fsdp_memory: the {mode} job on {processes} processes failed (exit {done.returncode}):\n"
             f"{done.stderr[-3000:]}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--worker", choices=MODES)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    parameters_mb = LAYERS * (WIDTH * WIDTH + WIDTH) * 4 / 2**20
    print(f"model: {parameters_mb:.0f} MB of fp32 parameters, AdamW, {args.steps} steps; peak RSS above "
          "each process's start, MB")  # fmt: skip
    means: dict[tuple[str, int], float] = {}
    for processes in PROCESS_COUNTS:
        for mode in MODES:
            peaks = run_job(mode, processes, args.steps)
            means[mode, processes] = statistics.mean(peaks)
            ranks = ", ".join(f"{peak:.0f}" for peak in peaks)
            mean = means[mode, processes]
            print(f"{mode:>4} on {processes} processes: mean {mean:7.0f} per rank  (ranks: {ranks})")
    for processes in PROCESS_COUNTS:
        ratio = means["fsdp", processes] / means["ddp", processes]
        print(f"FSDP/DDP per rank on {processes} processes: {ratio:.2f}")
    falls = means["fsdp", PROCESS_COUNTS[-1]] / means["fsdp", PROCESS_COUNTS[0]]
    print(f"FSDP per rank, {PROCESS_COUNTS[-1]} processes / {PROCESS_COUNTS[0]}: {falls:.2f} (must be < 1)")


if __name__ == "__main__":
    main()
