"""An accel training function under Ray Train's TorchTrainer (2 CPU workers, gloo, a local cluster):
the Accelerator adopts the process group Ray made, trains to the same weights as the same code
under `accel launch --num_processes 2`, and resumes from a `save_state` folder reported as Ray's
checkpoint to the weights of the run that never stopped.

Weights are compared bit for bit: both jobs run the same operations in the same order on the same
data shards, two gloo ranks on one machine with one thread each (ACCEL_DEBUG_MODE and
OMP_NUM_THREADS reach Ray's workers as they reach the launched ranks), and a two-rank all-reduce
sums the same two gradients either way. A difference, however small, means the jobs differ.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip(
    "ray.train.torch", reason="Ray runs in the nox session ray (`nox -s ray`), which installs ray[train]"
)

from accel_launch.testing.ranks import launch_script  # noqa: E402 - after the skip: only where Ray is

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKERS = 2
# A fit that stalls (a rank stuck in a collective) is stopped: gloo's timeout first, then the whole run.
COLLECTIVE_TIMEOUT_S = 120
FIT_DEADLINE_S = 600
# Mid-way through the second epoch (8 steps per epoch): the resume restores the epoch and skips batches.
STOP_AT_STEP = 11


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Print every thread's stack and end the test run if the block is still running after `seconds`."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def fit(train_function: Any, config: dict[str, Any], storage: Path, name: str) -> Any:
    """Run `train_function` on 2 CPU workers with TorchTrainer; return Ray's Result (raises on failure)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        train_loop_per_worker=train_function,
        train_loop_config=config,
        torch_config=TorchConfig(backend="gloo", timeout_s=COLLECTIVE_TIMEOUT_S),
        scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False),
        run_config=RunConfig(storage_path=str(storage), name=name),
    )
    with deadline(FIT_DEADLINE_S):
        return trainer.fit()


def read_facts(folder: Path, tag: str) -> list[dict[str, Any]]:
    """Return each rank's facts of the run `tag`, by rank."""
    return [json.loads((folder / f"{tag}_rank{rank}.json").read_text()) for rank in range(WORKERS)]


def assert_same_weights(found: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    assert found["weights"].keys() == expected["weights"].keys(), what
    for name, values in found["weights"].items():
        assert values == expected["weights"][name], f"{what}: {name} differs"


@pytest.fixture(scope="module")
def uninterrupted(training_job: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Each worker's facts of the plain training function run once under TorchTrainer."""
    folder = tmp_path_factory.mktemp("ray-uninterrupted")
    fit(
        training_job.train_loop_per_worker, {"output": str(folder), "tag": "ray"}, folder / "storage", "plain"
    )
    return read_facts(folder, "ray")


def test_accelerator_adopts_the_process_group_ray_made(uninterrupted):
    for worker in uninterrupted:
        assert worker["group_made_by_ray"], "Ray had not made a process group before the Accelerator"
        assert worker["same_group"], "the Accelerator replaced the process group Ray made"
        assert (worker["rank"], worker["world_size"]) == (worker["ray_rank"], worker["ray_world_size"])
        assert worker["local_rank"] == worker["ray_local_rank"]
        assert worker["world_size"] == WORKERS
        assert worker["device"] == "cpu"
        assert worker["distributed_type"] == "MULTI_CPU"
        assert worker["group_backend"] == "gloo"
        assert worker["master_addr"] == "127.0.0.1", "Ray's rendezvous left the loopback"
    assert sorted(worker["rank"] for worker in uninterrupted) == list(range(WORKERS))


def test_ray_run_ends_with_the_weights_of_accel_launch(uninterrupted, tmp_path):
    result = launch_script(HERE / "training_job.py", WORKERS, [tmp_path], timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    launched = read_facts(tmp_path, "launch")
    for rank in range(WORKERS):
        assert launched[rank]["distributed_type"] == "MULTI_CPU"
        assert_same_weights(uninterrupted[rank], launched[rank], f"rank {rank}, Ray vs accel launch")
    # DDP keeps the replicas equal: one set of weights per job.
    assert_same_weights(uninterrupted[1], uninterrupted[0], "Ray's two workers")


def test_save_state_into_rays_checkpoint_and_resume_matches_uninterrupted_run(
    training_job: ModuleType, uninterrupted, tmp_path
):
    storage = tmp_path / "storage"
    config = {"output": str(tmp_path), "tag": "resumed", "stop": STOP_AT_STEP}
    stopped = fit(training_job.train_with_ray_checkpoints, config, storage, "stops")
    assert stopped.checkpoint is not None, "the stopped run reported no checkpoint"
    saved = Path(stopped.checkpoint.path)
    assert saved.is_relative_to(storage / "stops"), saved  # Ray copied it into the run's storage
    assert (saved / "checkpoint.json").is_file(), sorted(p.name for p in saved.iterdir())
    files = json.loads((saved / "checkpoint.json").read_text())["files"]
    assert {f"random_states_{rank}.safetensors" for rank in range(WORKERS)} <= files.keys(), files.keys()
    assert not list(tmp_path.glob("resumed_rank*.json")), "the stopped run went past its stop"

    # The same run name and storage: Ray hands its latest checkpoint to `ray.train.get_checkpoint()`.
    fit(training_job.train_with_ray_checkpoints, {**config, "stop": None}, storage, "stops")
    resumed = read_facts(tmp_path, "resumed")
    for rank in range(WORKERS):
        assert resumed[rank]["resumed_at"] == STOP_AT_STEP
        assert resumed[rank]["same_group"] and resumed[rank]["rank"] == resumed[rank]["ray_rank"]
        assert_same_weights(resumed[rank], uninterrupted[rank], f"rank {rank}, resumed vs uninterrupted")
