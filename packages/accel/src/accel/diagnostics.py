"""The payload of `accel test`: checks that the launched set-up trains, printed as a PASS/FAIL checklist.

Started on every rank by `accel test` (`accel launch -m accel.diagnostics`); each check runs on all
ranks, the verdicts are combined across ranks, and the main process prints one line per check.
Exit code 0 only when every check passed on every rank.
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from accel import Accelerator, set_seed
from accel_state import gather_object
from accel_state.environment import env_vars

# A check that hangs in a collective must end as a failure, not stall the test for 30 minutes.
_COLLECTIVE_TIMEOUT_S = 120.0
_TRAIN_STEPS = 20


def check_process_group(accelerator: Accelerator) -> str:
    """Return a detail line when the process group matches the launcher's env vars; raise otherwise."""
    expected_world = env_vars.read_int(env_vars.WORLD_SIZE, 1)
    expected_rank = env_vars.read_int(env_vars.RANK, 0)
    assert accelerator.num_processes == expected_world, (
        f"world size {accelerator.num_processes}, launcher said {expected_world}"
    )
    assert accelerator.process_index == expected_rank, (
        f"rank {accelerator.process_index}, launcher said {expected_rank}"
    )
    if expected_world > 1:
        assert torch.distributed.is_initialized(), "no process group although WORLD_SIZE > 1"
        backend = torch.distributed.get_backend()
        return f"world size {expected_world}, backend {backend}"
    return "one process, no process group needed"


def check_device(accelerator: Accelerator) -> str:
    """Return the device name after a tensor round-trips through it."""
    device = accelerator.device
    if env_vars.read_flag(env_vars.USE_CPU):
        assert device.type == "cpu", f"{env_vars.USE_CPU} is set but the device is {device}"
    value = torch.arange(4.0).to(device) * 2
    assert value.cpu().tolist() == [0.0, 2.0, 4.0, 6.0], "arithmetic on the device gave a wrong result"
    return str(device)


def check_data_sharding(accelerator: Accelerator) -> str:
    """Return a detail line when every item is seen exactly once across ranks (gather_for_metrics)."""
    count = 4 * accelerator.num_processes + 3  # not a multiple of the batches: the last one is uneven
    items: Any = torch.arange(count)  # a tensor is a map-style dataset
    loader: torch.utils.data.DataLoader = torch.utils.data.DataLoader(items, batch_size=2)
    seen = []
    for batch in accelerator.prepare(loader):
        seen.extend(accelerator.gather_for_metrics(batch).tolist())
    assert sorted(seen) == list(range(count)), f"items seen across ranks: {sorted(seen)}"
    return f"{count} items, each once"


def check_rng_sync(accelerator: Accelerator) -> str:
    """Return a detail line when a tensor drawn after set_seed is equal on every rank."""
    set_seed(1234)
    drawn = torch.rand(4).to(accelerator.device)
    everyone = accelerator.gather(drawn[None]).cpu()
    assert all(torch.equal(row, everyone[0]) for row in everyone), f"ranks drew {everyone.tolist()}"
    return "equal on every rank"


def check_gather_and_pad(accelerator: Accelerator) -> str:
    """Return a detail line when gather and pad_across_processes put every rank's data in order."""
    world, rank = accelerator.num_processes, accelerator.process_index
    ranks = accelerator.gather(torch.tensor([rank], device=accelerator.device)).cpu().tolist()
    assert ranks == list(range(world)), f"gather gave {ranks}"
    ragged = torch.full((rank + 1,), rank + 1, device=accelerator.device)
    padded = accelerator.pad_across_processes(ragged, pad_index=0)
    assert padded.shape[0] == world, f"padded length {padded.shape[0]}, expected {world}"
    rows = accelerator.gather(padded[None]).cpu().tolist()
    expected = [[r + 1] * (r + 1) + [0] * (world - r - 1) for r in range(world)]
    assert rows == expected, f"padded rows {rows}, expected {expected}"
    return f"{world} rank(s) in order"


def check_mixed_precision_step(accelerator: Accelerator) -> str:
    """Return a detail line when a forward in reduced precision and an optimizer step work."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(accelerator.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    inputs = torch.randn(16, 8, device=accelerator.device)
    if accelerator.mixed_precision != "no":
        context, mode = accelerator.autocast(), accelerator.mixed_precision
    else:
        # The run itself is full precision: still check that bf16 works here (on CPU too).
        context, mode = torch.autocast(accelerator.device.type, dtype=torch.bfloat16), "bf16"
    with context:
        output = model(inputs)
    wanted = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    if wanted is not None:
        assert output.dtype == wanted, f"{mode} forward gave {output.dtype}"
    loss = output.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(model.weight).all(), "weights are not finite after the step"
    assert not torch.equal(model.weight.detach(), before), "the step did not change the weights"
    return f"{mode} forward ({output.dtype}), step applied"


def check_training(accelerator: Accelerator) -> str:
    """Return the loss before and after a short training run when it falls (y = 2x + 3)."""
    set_seed(42)
    inputs = torch.linspace(-1, 1, 64)[:, None]
    dataset = torch.utils.data.TensorDataset(inputs, 2 * inputs + 3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses: list[float] = []
    while len(losses) < _TRAIN_STEPS:
        for x, y in loader:
            optimizer.zero_grad()
            with accelerator.autocast():
                loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
            accelerator.backward(loss)
            optimizer.step()
            losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())
            if len(losses) == _TRAIN_STEPS:
                break
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first, f"loss did not fall: {first:.4f} -> {last:.4f}"
    return f"loss {first:.4f} -> {last:.4f} over {_TRAIN_STEPS} steps"


def check_save_load(accelerator: Accelerator) -> str:
    """Return a detail line when a state dict survives torch.save / torch.load(weights_only=True)."""
    model = torch.nn.Linear(3, 2)
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    with tempfile.TemporaryDirectory(prefix=f"accel-test-rank{accelerator.process_index}-") as folder:
        path = Path(folder) / "model.pt"
        torch.save(state, path)
        loaded = torch.load(path, weights_only=True)
    assert loaded.keys() == state.keys(), f"keys {sorted(loaded)} != {sorted(state)}"
    assert all(torch.equal(loaded[name], state[name]) for name in state), "values changed"
    return f"{len(state)} tensors round-tripped"


CHECKS: tuple[tuple[str, Callable[[Accelerator], str]], ...] = (
    ("process group", check_process_group),
    ("device", check_device),
    ("data sharding (each item once)", check_data_sharding),
    ("RNG sync", check_rng_sync),
    ("gather / pad_across_processes", check_gather_and_pad),
    ("mixed-precision step", check_mixed_precision_step),
    ("training (loss falls)", check_training),
    ("save/load round trip", check_save_load),
)


def run_checks(accelerator: Accelerator) -> list[tuple[str, bool, str]]:
    """Return (name, passed on every rank, detail) per check; every rank runs every check."""
    results = []
    for name, check in CHECKS:
        try:
            local = (True, check(accelerator))
        except Exception as error:  # noqa: BLE001 - a failed check is reported, not raised
            sys.stderr.write(
                f"rank {accelerator.process_index}: check {name!r} failed:\n{traceback.format_exc()}"
            )
            local = (False, f"rank {accelerator.process_index}: {type(error).__name__}: {error}")
        verdicts = gather_object([local])
        failed = [detail for passed, detail in verdicts if not passed]
        results.append((name, not failed, "; ".join(failed) if failed else local[1]))
    return results


def main() -> int:
    """Run the checks; the main process prints the checklist. Return 0 only when all passed."""
    accelerator = Accelerator(timeout=_COLLECTIVE_TIMEOUT_S)
    results = run_checks(accelerator)
    if accelerator.is_main_process:
        lines = [
            f"accel test: {accelerator.num_processes} process(es) on {accelerator.device}, "
            f"mixed precision {accelerator.mixed_precision}"
        ]
        lines += [f"{'PASS' if passed else 'FAIL'}  {name}: {detail}" for name, passed, detail in results]
        failed = sum(not passed for _, passed, _ in results)
        lines.append(
            f"accel test: all {len(results)} checks passed"
            if not failed
            else f"accel test: {failed} of {len(results)} checks FAILED"
        )
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    accelerator.wait_for_everyone()
    return 0 if all(passed for _, passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
