"""A 2-rank training job whose rank 1 stalls in its own code between two steps while rank 0 goes on
into the next step's collective: FSDP2's parameter all-gather in the forward (`fsdp`), or
DeepSpeed's gradient all-reduce (`deepspeed`, ZeRO-2). The hang-diagnosis tests find the lines they
expect by their code (the `stall_between_steps` fixture)."""

import sys
import time

import torch

from accel import Accelerator

if sys.argv[1] == "deepspeed":
    from accel import DeepSpeedPlugin  # needs accel-deepspeed

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
else:
    accelerator = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(3):
    if step == 1 and accelerator.process_index == 1:
        time.sleep(300)
    loss = model(torch.ones(2, 4)).sum()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
print("NO STALL", flush=True)
