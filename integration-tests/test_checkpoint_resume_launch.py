"""Checkpoints across real jobs: exact resume on 2 ranks, SIGKILL during saves, collective timeouts.

Also a script: `python test_checkpoint_resume_launch.py save-forever DIR` (the job the kill test
kills).
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

THIS_FILE = Path(__file__).resolve()
TOLERANCE = 0.0  # bit-exact: the resumed run is the run that never stopped
EPOCHS, SAMPLES, BATCH = 3, 64, 4  # 2 ranks: 8 batches per rank and epoch


def _save(accelerator, folder=None):
    return accelerator.save_state(folder)


def _load(accelerator, folder=None):
    return accelerator.load_state(folder)


def _build(mixed_precision, accumulation, project=None):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator, set_seed

    accelerator = Accelerator(mixed_precision=mixed_precision, gradient_accumulation_steps=accumulation)
    if project is not None:
        accelerator.project_configuration = project
    set_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 6, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.8)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler, loader)


def train_segment(folder, start, stop, mixed_precision, accumulation):
    """Train batches [start, stop) of the run (resuming from `folder` if start > 0); save at stop.

    Returns the final weights when the run reaches its end, else None.
    """
    from accel.testing import train_steps

    accelerator, model, optimizer, scheduler, loader = _build(mixed_precision, accumulation)
    per_epoch = len(loader)
    first_epoch, skip = divmod(start, per_epoch)
    if start:
        _load(accelerator, folder)
        assert loader.epoch == first_epoch, (loader.epoch, first_epoch)
    done = start
    for epoch in range(first_epoch, EPOCHS):
        loader.set_epoch(epoch)
        batches = loader
        if epoch == first_epoch and skip:
            batches = accelerator.skip_first_batches(loader, skip)
        for batch in batches:
            train_steps(accelerator, model, optimizer, [batch], scheduler=scheduler)
            done += 1
            if done == stop:
                _save(accelerator, folder)
                return None
    state = accelerator.unwrap_model(model).state_dict()
    return {k: v.tolist() for k, v in state.items()}


def _max_diff(a, b):
    import torch

    return max((torch.tensor(a[k]) - torch.tensor(b[k])).abs().max().item() for k in a)


@pytest.mark.parametrize(
    "mixed_precision, accumulation, stops",
    # Stops fall on optimizer steps (gradients being accumulated are not checkpointed); 8 and 16
    # are epoch ends, the others mid-epoch.
    [("no", 1, [5, 8, 13, 19]), ("fp16", 2, [6, 8, 14])],
)
def test_resume_in_fresh_jobs_matches_uninterrupted_run_launch(
    tmp_path, mixed_precision, accumulation, stops
):
    folder = str(tmp_path / "ckpt")
    reference = run_on_ranks(train_segment, 2, folder + "-ref", 0, None, mixed_precision, accumulation)
    start = 0
    for stop in stops:
        assert (
            run_on_ranks(train_segment, 2, folder, start, stop, mixed_precision, accumulation) == [None] * 2
        )
        start = stop
    resumed = run_on_ranks(train_segment, 2, folder, start, None, mixed_precision, accumulation)
    for rank in range(2):
        assert _max_diff(resumed[rank], reference[rank]) <= TOLERANCE
    saved = list(Path(folder).rglob("checkpoint.json"))
    assert saved
    for metadata in saved:  # each rank's files are checked by what they hold
        files = json.loads(metadata.read_text())["files"]
        assert all("content" in files[f"random_states_{rank}.safetensors"] for rank in range(2)), metadata


# SIGKILL during saves ----------------------------------------------------------------------------------
def _saver_objects(project_dir):
    import torch

    from accel import Accelerator
    from accel.options.project_config import ProjectConfiguration

    accelerator = Accelerator()
    accelerator.project_configuration = ProjectConfiguration(
        project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2
    )
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    counter = _Counter()
    accelerator.register_for_checkpointing(counter)
    return accelerator, model, optimizer, counter


class _Counter:
    def __init__(self):
        self.value = -1

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def _check_consistent(model, optimizer, counter):
    """Every weight of a save holds that save's counter value, and AdamW's state its step count."""
    import torch

    for parameter in model.parameters():
        assert torch.all(parameter == counter.value), "weights of another save than the counter's"
    steps = {float(s["step"]) for s in optimizer.state.values()}
    assert steps == ({float(counter.value + 1)} if counter.value >= 0 else set()), steps


def save_forever(project_dir, ready_file=None):
    """Load the newest checkpoint (if any), then save new ones until killed, in both folder kinds.

    After the first save it creates `ready_file` (if given).
    """
    import torch

    accelerator, model, optimizer, counter = _saver_objects(project_dir)
    explicit = Path(project_dir) / "latest"
    if (Path(project_dir) / "checkpoints").exists():
        _load(accelerator, None)
        _check_consistent(model, optimizer, counter)
    while True:
        counter.value += 1
        accelerator.backward(sum(p.sum() for p in model.parameters()))
        optimizer.step()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(counter.value)
        _save(accelerator)
        # With automatic naming a folder argument would become the project folder (Accelerate's rule).
        accelerator.project_configuration.automatic_checkpoint_naming = False
        _save(accelerator, explicit)
        accelerator.project_configuration.automatic_checkpoint_naming = True
        if ready_file is not None and not os.path.exists(ready_file):
            Path(ready_file).touch()


def fork_server(project_dir):
    """For each line read, fork a job (its own session) running save_forever; report its pid and its end.

    Importing torch takes seconds; forking this already-imported process lets the kill test start
    20 fresh jobs well within its time budget.
    """
    import torch._dynamo  # noqa: F401 - imported before forking, once (an optimizer's first use imports it)

    import accel.checkpointing  # noqa: F401

    for line in sys.stdin:
        ready_file = line.strip()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            faulthandler.register(signal.SIGUSR1, file=open(f"{ready_file}.stacks", "w"), all_threads=True)
            try:
                save_forever(project_dir, ready_file=ready_file)
            except BaseException:
                # os._exit skips the traceback that would otherwise be printed: keep it for the test.
                Path(f"{ready_file}.error").write_text(traceback.format_exc())
            finally:
                os._exit(1)
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("reaped", flush=True)


def test_sigkill_during_saves_leaves_a_loadable_checkpoint(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "RANK", "WORLD_SIZE", "LOCAL_"))
    }
    rng = random.Random(0)
    last_seen, interrupted = -1, 0
    server = subprocess.Popen(
        [sys.executable, str(THIS_FILE), "fork-server", str(tmp_path / "project")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for attempt in range(20):
            ready = tmp_path / f"ready-{attempt}"
            server.stdin.write(f"{ready}\n")
            server.stdin.flush()
            job = int(server.stdout.readline())
            _wait_for_first_save(job, ready, attempt)
            time.sleep(rng.uniform(0.0, 0.25))
            os.killpg(job, signal.SIGKILL)
            assert server.stdout.readline().strip() == "reaped"
            project = tmp_path / "project"
            leftovers = [
                p for d in (project, project / "checkpoints") for p in d.iterdir() if p.name[0] == "."
            ]
            interrupted += bool(leftovers)
            last_seen = _load_newest_and_check(tmp_path / "project", last_seen)
    finally:
        server.kill()
        server.wait()
    assert interrupted >= 5, f"only {interrupted} of 20 kills landed inside a save"


def _wait_for_first_save(job, ready, attempt, seconds=120):
    """Wait until job `attempt` has saved once; fail with its traceback, or its stacks if it is stuck."""
    error = Path(f"{ready}.error")
    deadline = time.monotonic() + seconds
    while not ready.exists():
        assert not error.exists(), f"job {attempt} failed before its first save:\n{error.read_text()}"
        if time.monotonic() > deadline:
            os.kill(job, signal.SIGUSR1)
            time.sleep(2)
            stacks = Path(f"{ready}.stacks").read_text()
            pytest.fail(f"job {attempt} made no checkpoint within {seconds} s; its stacks:\n{stacks}")
        time.sleep(0.005)


def _load_newest_and_check(project_dir, last_seen):
    from accel_state.testing import single_process_environment

    with single_process_environment():
        for folder in (None, project_dir / "latest"):
            accelerator, model, optimizer, counter = _saver_objects(project_dir)
            _load(accelerator, folder)
            _check_consistent(model, optimizer, counter)
            assert counter.value >= last_seen
    # total_limit 2, plus the temporary folder of the save in flight (and its lock file, not counted)
    kept = [p for p in (project_dir / "checkpoints").iterdir() if not p.name.endswith(".lock")]
    assert len(kept) <= 3, kept
    return counter.value


# Elastic restart --------------------------------------------------------------------------------------
# Collective timeouts ----------------------------------------------------------------------------------
def rank_one_never_arrives(operation, timeout):
    """Rank 1 sleeps past the (3 s) timeout; rank 0 reports what it raised and after how long."""
    import torch

    from accel import Accelerator

    accelerator = Accelerator(timeout=timeout)
    if accelerator.process_index == 1:
        time.sleep(8)
        return None
    started = time.monotonic()
    try:
        if operation == "wait_for_everyone":
            accelerator.wait_for_everyone()
        elif operation == "gather":
            accelerator.gather(torch.ones(2))
        else:
            accelerator.save_state(os.environ["CKPT_DIR"])
    except Exception as error:  # noqa: BLE001 - the error is the result
        return type(error).__name__, str(error), time.monotonic() - started
    return "no error", "", time.monotonic() - started


@pytest.mark.parametrize("operation", ["wait_for_everyone", "save_state"])
def test_a_missing_rank_fails_the_others_after_the_timeout_naming_the_operation_launch(tmp_path, operation):
    result, _ = run_on_ranks(rank_one_never_arrives, 2, operation, 3, env={"CKPT_DIR": str(tmp_path / "c")})
    name, message, seconds = result
    assert name == "CollectiveTimeoutError", message
    assert message.startswith(operation) and "rank 0 of 2 waited 3 s" in message
    assert 2.5 < seconds < 15


def main_process_stalls_while_reading(timeout):
    """The main process reads a dispatched stream that stalls; rank 1 reports what it raised, when."""
    import torch

    from accel import Accelerator

    class Stalling(torch.utils.data.IterableDataset):
        def __iter__(self):
            time.sleep(8)
            yield from torch.arange(8.0)

    accelerator = Accelerator(timeout=timeout)
    loader = accelerator.prepare(torch.utils.data.DataLoader(Stalling(), batch_size=2))
    if accelerator.process_index == 0:
        try:
            list(loader)  # stalls; rank 1 may have gone by its next scatter
        except Exception:  # noqa: BLE001 - only rank 1's view is under test
            pass
        return None
    started = time.monotonic()
    try:
        next(iter(loader))
    except Exception as error:  # noqa: BLE001 - the error is the result
        return type(error).__name__, str(error), time.monotonic() - started
    return "no error", "", time.monotonic() - started


def test_a_stalled_main_process_fails_dispatched_ranks_after_the_timeout_launch():
    name, message, seconds = run_on_ranks(main_process_stalls_while_reading, 2, 3)[1]
    assert name == "CollectiveTimeoutError", message
    assert message.startswith("the dispatched data loader") and "waited 3 s" in message
    assert 2.5 < seconds < 15


def test_accel_timeout_env_sets_the_timeout_launch():
    result, _ = run_on_ranks(rank_one_never_arrives, 2, "gather", None, env={"ACCEL_TIMEOUT": "3"})
    name, message, seconds = result
    assert name == "CollectiveTimeoutError" and message.startswith("gather"), message
    assert "waited 3 s" in message and 2.5 < seconds < 15


if __name__ == "__main__":
    if sys.argv[1] == "save-forever":
        save_forever(sys.argv[2])
    elif sys.argv[1] == "fork-server":
        fork_server(sys.argv[2])
