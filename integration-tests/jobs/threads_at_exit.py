"""A small training job that lists its threads from an exit handler running after accel's teardown.

`python threads_at_exit.py global|local`: the prepared objects stay in module globals (as most
scripts keep them) or are dropped when training returns. Prints one line per rank:
THREADS {"rank": ..., "names": [...]}. Launched by test_exit_teardown_launch.py and the DeepSpeed
session's exit test.
"""

import atexit
import json
import os
import sys

import torch

from accel import Accelerator


def report_threads() -> None:
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as comm:
            names.append(comm.read().strip())
    line = "THREADS " + json.dumps({"rank": os.environ["RANK"], "names": sorted(names)}) + "\n"
    # One write, so that the ranks' lines never interleave on the shared pipe.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


# Registered before the Accelerator joins the process group, so it runs after accel's teardown
# (exit handlers run last-in first-out).
atexit.register(report_threads)


def train() -> tuple:
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(2):
        optimizer.zero_grad()
        accelerator.backward(model(torch.randn(3, 4)).sum())
        optimizer.step()
    return accelerator, model, optimizer


if sys.argv[1] == "global":
    accelerator, model, optimizer = train()
else:
    train()
