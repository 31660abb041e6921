"""Two XLA replicas (threads of one process on the CPU device) run a scenario through an
Accelerator and print one `RESULT <json>` line each. Started by test_two_replicas.py.

The harness staggers the replicas (rank * STAGGER seconds) before each sync of a new graph:
on XLA's CPU device, replicas that compile the same collective graph at the same moment can
wait for each other forever (pytorch/xla#9089, #5005). Production TPUs need no such pause.
Where one call runs several new collective graphs back to back (an object broadcast: lengths,
then bytes), the scenario staggers each new one in the communicator (`_stagger_new_collectives`).
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


_patching = threading.Lock()


def _stagger_new_collectives() -> None:
    """Stagger each replica before every collective graph of the communicator it has not run yet
    (patched once for the process, which the replicas are threads of)."""
    import torch_xla.runtime as xr

    from accel_xla.engine.communicator import XlaCommunicator

    with _patching:
        if getattr(XlaCommunicator, "staggered", False):
            return
        seen: set[tuple] = set()

        def staggered(method):
            def run(self, *args):
                rank = xr.global_ordinal()
                shapes = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
                if (rank, method.__name__, shapes) not in seen:
                    seen.add((rank, method.__name__, shapes))
                    _stagger(rank)
                return method(self, *args)

            return run

        XlaCommunicator.all_gather_into = staggered(XlaCommunicator.all_gather_into)
        XlaCommunicator._all_reduce = staggered(XlaCommunicator._all_reduce)
        XlaCommunicator.staggered = True


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
    _stagger(rank)  # prepare copies replica 0's weights to every replica (a collective)
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


def _gather_beside(accelerator) -> dict:
    """The same 256 KB gather seven times: from the third, the data travels beside the check."""
    from accel_state import PartialState
    from accel_state.collectives.capacity import capacity_of

    rank = accelerator.process_index
    _stagger(rank)
    communicator = PartialState().communicator
    rows = torch.arange(2**16, dtype=torch.float32).reshape(2**12, 16)
    besides, right = [], []
    for step in range(7):
        besides.append(capacity_of(communicator).beside)
        gathered = accelerator.gather((rows * step + rank).to(accelerator.device)).cpu()
        right.append(torch.equal(gathered, torch.cat([rows * step, rows * step + 1])))
    return {"besides": besides, "right": right}


def _host_state(model: torch.nn.Module) -> dict:
    return {name: value.detach().cpu().flatten().tolist() for name, value in model.state_dict().items()}


def _unseeded_model(accelerator) -> dict:
    rank = accelerator.process_index
    # No shared seed: the replicas are threads drawing one after the other from torch's generator.
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    with torch.no_grad():
        model[1].running_mean.uniform_()
        model[1].num_batches_tracked += rank + 1
    before = _host_state(model)
    _stagger(rank)
    model = accelerator.prepare(model)
    assert model[0].weight.device.type == "xla"
    return {"before": before, "after": _host_state(model)}


def _shuffled(accelerator) -> dict:
    """Two epochs of a shuffled loader, without and with a generator of its own (which the loader
    agrees with replica 0's at each pass); what each replica got and the order its sampler drew."""
    dataset = TensorDataset(torch.arange(24))
    results = {}
    for name, generator in (("plain", {}), ("generator", {"generator": torch.Generator().manual_seed(5)})):
        loader = accelerator.prepare(DataLoader(dataset, batch_size=3, shuffle=True, **generator))
        epochs = []
        for _ in range(2):
            batches, order = [], None
            for (batch,) in loader:
                if order is None:  # the pass has set the sampler's epoch
                    order = list(loader.batch_sampler.batch_sampler.sampler)
                batches.append(batch.cpu().tolist())
            epochs.append({"batches": batches, "order": order})
        results[name] = epochs
    return results


SCENARIOS = {
    "ordinals": _ordinals,
    "train": _train,
    "gather": _gather,
    "gather_beside": _gather_beside,
    "unseeded_model": _unseeded_model,
    "shuffled": _shuffled,
}
# Scenarios whose calls run several new collective graphs back to back (object broadcasts).
STAGGERED_COLLECTIVES = {"shuffled", "gather_beside"}


def replica(index: int, scenario: str) -> None:
    from accel import Accelerator

    if scenario in STAGGERED_COLLECTIVES:
        _stagger_new_collectives()
    accelerator = Accelerator()
    result = SCENARIOS[scenario](accelerator)
    result["rank"] = accelerator.process_index
    # One write per line: the replicas are threads sharing stdout.
    os.write(sys.stdout.fileno(), f"RESULT {json.dumps(result)}\n".encode())


if __name__ == "__main__":
    torch_xla.launch(replica, args=(sys.argv[1],))
