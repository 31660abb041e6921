"""`accel launch --xla` for real on XLA's CPU device: the script runs through torch_xla.launch, as
an XLA Accelerator, on 1 replica and on 2 (threads of one child process); and the backend's
`launch` returns each replica's result; notebook_launcher runs 1 replica in this process and 2
forked (a function of `__main__`, as a notebook's).

Each launch is its own process with a time limit. The 2-replica script staggers its replicas
before each new collective graph, as replicas_job.py does (the CPU device's simultaneous-compile
hang, pytorch/xla#9089); the launcher adds no such pause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator

    accelerator = Accelerator()
    rank = accelerator.process_index
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():  # the same start on every replica: replica threads share torch's generator
        model.weight.copy_(torch.tensor([[0.1, -0.2, 0.3, -0.4]]))
        model.bias.fill_(0.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    targets = inputs @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=8)
    time.sleep(float(os.environ.get("STAGGER", "0")) * rank)  # prepare copies replica 0's weights
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for epoch in range(3):
        for batch_inputs, batch_targets in loader:
            loss = torch.nn.functional.mse_loss(model(batch_inputs), batch_targets)
            accelerator.backward(loss)
            if epoch == 0:  # the first epoch meets every new graph of the loop
                time.sleep(float(os.environ.get("STAGGER", "0")) * rank)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    result = {
        "rank": rank,
        "world": accelerator.num_processes,
        "type": str(accelerator.distributed_type),
        "device": accelerator.device.type,
        "argv": sys.argv[1:],
        "name": __name__,
        "first": losses[0],
        "last": losses[-1],
        "weight": model.weight.detach().cpu().flatten().tolist(),
    }
    os.write(sys.stdout.fileno(), ("RESULT " + json.dumps(result) + "\\n").encode())
    """
)


def _launch(tmp_path: Path, num_processes: int, timeout: int) -> dict[int, dict]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("CPU_NUM_DEVICES", "ACCEL_DISTRIBUTED_TYPE")}
    # The launcher sets what an XLA job needs; debug mode's extra exchanges would add new graphs.
    env.update(PJRT_DEVICE="CPU", OMP_NUM_THREADS="1", ACCEL_DEBUG_MODE="0", STAGGER="1.0")
    if num_processes > 1:  # the script staggers its replicas, which the launcher asks to be told
        env["CPU_NUM_DEVICES"] = str(num_processes)
    command = [
        sys.executable, "-m", "accel_launch.commands.cli", "launch", "--xla",
        "--num_processes", str(num_processes), str(script), "--flag", "x",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"accel launch --xla ran past {timeout} s:\n{error.stdout}\n{error.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    results = [json.loads(line.removeprefix("RESULT ")) for line in lines]
    assert done.returncode == 0 and len(results) == num_processes, f"{done.stdout}\n{done.stderr[-4000:]}"
    return {result["rank"]: result for result in results}


def test_accel_launch_xla_runs_the_script_as_an_xla_accelerator_on_one_replica(tmp_path):
    (result,) = _launch(tmp_path, 1, timeout=120).values()
    assert (result["world"], result["type"], result["device"]) == (1, "XLA", "xla")
    assert (result["name"], result["argv"]) == ("__main__", ["--flag", "x"])
    assert result["last"] < result["first"] / 10


@pytest.mark.slow
def test_accel_launch_xla_runs_two_replicas_whose_weights_agree(tmp_path):
    results = _launch(tmp_path, 2, timeout=120)
    assert sorted(results) == [0, 1]
    assert {r["world"] for r in results.values()} == {2}
    assert {r["type"] for r in results.values()} == {"XLA"}
    assert results[0]["weight"] == results[1]["weight"]
    assert results[0]["last"] < results[0]["first"]


def _square(x: int) -> int:
    return x * x


def test_the_launch_hook_starts_replicas_through_the_backends_launch_code():
    from accel_state.seam.launch_hook import launch_hooks

    hook = launch_hooks()["XLA"]
    assert not hook.stand_in
    assert hook.start_replicas is not None
    assert hook.start_replicas(_square, (4,), num_processes=1) == [16]


def test_the_backends_launch_returns_the_replicas_results_in_this_process():
    from accel_xla import XlaBackend

    assert XlaBackend.launch(_square, (3,), num_processes=1) == [9]
    with pytest.raises(ValueError, match="start_method"):
        XlaBackend.launch(_square, (3,), start_method="forkserver")


def _describe_run() -> tuple[str, str, int]:
    from accel import Accelerator

    accelerator = Accelerator()
    return str(accelerator.distributed_type), accelerator.device.type, accelerator.num_processes


def test_notebook_launcher_runs_one_replica_through_torch_xla_here():
    from accel import notebook_launcher

    assert notebook_launcher(_describe_run, num_processes=1) == [("XLA", "xla", 1)]


NOTEBOOK = textwrap.dedent(
    """
    import os, time

    from accel import Accelerator, notebook_launcher

    def describe():  # defined in __main__, as a notebook cell's function is: the replicas are forked
        accelerator = Accelerator()
        time.sleep(accelerator.process_index)  # the CPU device's simultaneous-compile hang
        gathered = accelerator.gather(accelerator.process_index * torch.ones(1, device=accelerator.device))
        return accelerator.process_index, accelerator.num_processes, gathered.cpu().tolist()

    import torch

    print("RESULTS", notebook_launcher(describe, num_processes=2))
    """
)


@pytest.mark.slow
def test_notebook_launcher_forks_two_replicas_and_returns_their_results(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    env = {k: v for k, v in os.environ.items() if k not in ("CPU_NUM_DEVICES", "ACCEL_DISTRIBUTED_TYPE")}
    env.update(PJRT_DEVICE="CPU", OMP_NUM_THREADS="1", ACCEL_DEBUG_MODE="0")
    try:
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"notebook_launcher ran past 120 s:\n{error.stdout}\n{error.stderr}")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "RESULTS [(0, 2, [0.0, 1.0]), (1, 2, [0.0, 1.0])]" in done.stdout, done.stdout
