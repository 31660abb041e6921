"""Two XLA replicas on the CPU device (CPU_NUM_DEVICES=2: threads of one process), each scenario
in its own process with a 60 s limit (see replicas_job.py for the harness's stagger)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("replicas_job.py")

pytestmark = pytest.mark.slow


def _run(scenario: str) -> dict[int, dict]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "OMP_NUM_THREADS": "1"}
    # Debug mode's full-description exchange runs several new collective graphs back to back,
    # which the CPU device's simultaneous-compile hang catches between two staggers.
    env["ACCEL_DEBUG_MODE"] = "0"
    try:
        done = subprocess.run(
            [sys.executable, str(JOB), scenario], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"two replicas ran {scenario!r} past 60 s:\n{error.stdout}\n{error.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    results = [json.loads(line.removeprefix("RESULT ")) for line in lines]
    assert done.returncode == 0 and len(results) == 2, f"{done.stdout}\n{done.stderr[-4000:]}"
    return {result["rank"]: result for result in results}


def test_two_replicas_have_their_ordinals_and_the_world_size():
    results = _run("ordinals")
    assert sorted(results) == [0, 1]
    assert {r["world"] for r in results.values()} == {2}
    assert {r["type"] for r in results.values()} == {"XLA"}
    assert [results[0]["main"], results[1]["main"]] == [True, False]
    assert len({r["pid"] for r in results.values()}) == 1  # threads of one process
    assert len({r["thread"] for r in results.values()}) == 2  # each with its own state


def test_the_gradient_all_reduce_keeps_both_replicas_weights_identical():
    results = _run("train")
    assert results[0]["first_inputs"] != results[1]["first_inputs"]  # each replica its own shard
    assert results[0]["weight"] == results[1]["weight"]
    assert results[0]["weight"] != [0.1, -0.2, 0.3, -0.4]


def test_gather_returns_both_replicas_data_on_each():
    results = _run("gather")
    for result in results.values():
        assert result["gathered"] == [0.0, 10.0, 1.0, 11.0]


def test_a_repeated_gather_travels_beside_the_check_exactly_on_both_replicas():
    results = _run("gather_beside")
    for result in results.values():
        assert result["right"] == [True] * 7
        assert result["besides"] == [0] * 2 + [2**18] * 5  # foreseen once a gather followed one


def test_prepare_gives_every_replica_the_first_replicas_weights():
    results = _run("unseeded_model")
    before = {rank: results[rank]["before"] for rank in (0, 1)}
    assert before[0]["0.weight"] != before[1]["0.weight"]  # the replicas drew different weights
    assert before[0]["1.num_batches_tracked"] != before[1]["1.num_batches_tracked"]
    for result in results.values():
        assert result["after"] == before[0]


@pytest.mark.parametrize("loader", ["plain", "generator"])
def test_a_shuffled_loader_gives_disjoint_shards_of_one_permutation_per_epoch(shuffled, loader):
    # The permutation is read from what the replicas got: with Accelerate's default sampler a
    # second pass over the sampler would draw a new one, so the sampler cannot be asked again.
    epochs = {rank: shuffled[rank][loader] for rank in (0, 1)}
    orders = []
    for epoch in (0, 1):
        batches = {rank: epochs[rank][epoch]["batches"] for rank in (0, 1)}
        assert len(batches[0]) == len(batches[1]) == 4
        # replica r takes global batches r, r + 2, ...: interleaved, they are one permutation
        order = [
            sample for pair in zip(batches[0], batches[1], strict=True) for batch in pair for sample in batch
        ]
        assert sorted(order) == list(range(24)), f"the replicas' shards overlap or miss samples: {batches}"
        orders.append(order)
    assert orders[0] != orders[1]  # each epoch its own shuffle
    assert orders[0] != list(range(24))  # shuffled at all


@pytest.fixture(scope="module")
def shuffled() -> dict[int, dict]:
    return _run("shuffled")
