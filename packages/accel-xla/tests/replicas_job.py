"""Two XLA replicas (threads of one process on the CPU device) run a scenario through an
Accelerator and print one `RESULT <json>` line each. Started by test_two_replicas.py.

The harness staggers the replicas (rank * STAGGER seconds) before each sync of a new graph:
on XLA's CPU device, replicas that compile the same collective graph at the same moment can
wait for each other forever (pytorch/xla#9089, #5005). Production TPUs need no such pause.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import torch
import torch_xla
from torch.utils.data import DataLoader, TensorDataset

STAGGER = float(os.environ.get("ACCEL_TEST_STAGGER", "1.0"))


def _stagger(rank: int) -> None:
    time.sleep(STAGGER * rank)


def _ordinals(accelerator) -> dict:
    return {
        "world": accelerator.num_processes,
        "local": accelerator.local_process_index,
        "type": accelerator.distributed_type.value,
        "device": str(accelerator.device),
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "main": accelerator.is_main_process,
    }


def _train(accelerator) -> dict:
    rank = accelerator.process_index
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():  # the same start on both replicas, whatever the shared RNG did
        model.weight.copy_(torch.tensor([[0.1, -0.2, 0.3, -0.4]]))
        model.bias.fill_(0.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.arange(160, dtype=torch.float32).reshape(40, 4) / 160
    targets = inputs @ torch.tensor([1.0, -2.0, 3.0, 0.5]).unsqueeze(1)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    first_inputs = []
    for step, (batch_inputs, batch_targets) in enumerate(loader):
        if step == 0:
            first_inputs = batch_inputs.cpu().flatten().tolist()
        loss = torch.nn.functional.mse_loss(model(batch_inputs), batch_targets)
        accelerator.backward(loss)
        _stagger(rank)
        optimizer.step()
        optimizer.zero_grad()
        if step == 4:
            break
    return {"weight": model.weight.detach().cpu().flatten().tolist(), "first_inputs": first_inputs}


def _gather(accelerator) -> dict:
    rank = accelerator.process_index
    _stagger(rank)
    gathered = accelerator.gather(torch.tensor([float(rank), 10.0 + rank], device=accelerator.device))
    return {"gathered": gathered.cpu().tolist()}


SCENARIOS = {"ordinals": _ordinals, "train": _train, "gather": _gather}


def replica(index: int, scenario: str) -> None:
    from accel import Accelerator

    accelerator = Accelerator()
    result = SCENARIOS[scenario](accelerator)
    result["rank"] = accelerator.process_index
    # One write per line: the replicas are threads sharing stdout.
    os.write(sys.stdout.fileno(), f"RESULT {json.dumps(result)}\n".encode())


if __name__ == "__main__":
    torch_xla.launch(replica, args=(sys.argv[1],))
