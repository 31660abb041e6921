"""The GPU check: `bash benchmarks/gpu_check.sh [--dry-run] [--output DIR]` (which runs `python -m
benchmarks.gpu_check` with our packages' source folders on PYTHONPATH) runs on one CUDA machine with
its preinstalled torch, in a few minutes, each step timed and its result recorded:

0. environment: torch, the CUDA device, and whether accel imports;
1. the suite's CUDA tests (those skipped without a GPU), through pytest;
2. fp32 / bf16 / fp16 training, `Accelerator(mixed_precision=...)` against the loop by hand (autocast,
   GradScaler for fp16) from one seed on one batch: losses equal within a tolerance, steps/s of each
   and the bf16/fp16 speed-up over fp32;
3. `Accelerator()` in a one-process world of `accel launch`: the cuda device, and no process group (a lone
   process needs none; the FSDP2 runs of step 4 join a group of one);
4. raw DDP, FSDP2 and an N-D mesh of ones on one GPU: a few steps each, their losses against DDP's,
   and the peak of `torch.cuda.max_memory_allocated`;
5. torch.compile on the GPU: the compile figure's 12-block encoder eager, fully compiled and compiled
   by region (inductor), time to the first step and steps/s (`compile_step.py`);
6. the head-to-head against Accelerate on the GPU: `python -m benchmarks --only precision --rounds 3`.

It writes gpu_check.json and gpu_check.md into the output folder (logs/ beside them) after every
step, and exits 1 if a step failed (a skipped one does not). `--only compile,head_to_head` runs the
environment and those steps alone (a GPU at hand for a few minutes can take the check in parts).
`--dry-run` runs every step's code on the CPU with tiny sizes (1 warm-up and 1 timed step), the
CUDA-only expectations replaced by their CPU counterparts.
"""
