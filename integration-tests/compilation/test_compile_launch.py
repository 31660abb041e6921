"""torch.compile from the Accelerator on 2 real CPU processes (gloo): DDP with accumulation and
clipping, bf16 with regional compilation, FSDP2, each with dropout; each compiled run gives eager's
losses and weights, and gathers of compiled outputs work. One launch runs every case (compiling is
slow on 2 cores: inductor builds C++ kernels; its on-disk cache is shared by the ranks)."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

CASES = {
    "ddp, accumulation 2, clipping, inductor": {"backend": "inductor", "accumulation": 2, "clip": 0.5},
    # Inductor keeps a fused kernel's intermediates in fp32 where eager rounds each op to bf16: the
    # losses agree to bf16's precision (autocast itself is checked exactly in the unit tests).
    "ddp, bf16, regional, inductor": {
        "backend": "inductor",
        "regional": True,
        "mixed_precision": "bf16",
        "tolerance": 1e-2,
        "weight_tolerance": 4 * 1e-2,  # AdamW moves a weight by up to lr a step, whatever its gradient
    },
    "fsdp2, regional, inductor": {"backend": "inductor", "regional": True, "fsdp": True},
}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = (
            torch.nn.LayerNorm(16),
            torch.nn.Linear(16, 32),
            torch.nn.Linear(32, 16),
        )
        # On the CPU inductor draws dropout's masks from torch's generator, as eager does: the same seed
        # gives the compiled run eager's masks, and its losses.
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.down(torch.nn.functional.gelu(self.up(self.norm(x)))))


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def _run(case: dict, compiled: bool) -> dict:
    from accel import Accelerator, FullyShardedDataParallelPlugin
    from accel.utils import TorchDynamoPlugin
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()
    plugin = TorchDynamoPlugin(
        backend=case["backend"] if compiled else "no", use_regional_compilation=case.get("regional", False)
    )
    accelerator = Accelerator(
        dynamo_plugin=plugin,
        gradient_accumulation_steps=case.get("accumulation", 1),
        mixed_precision=case.get("mixed_precision", "no"),
        fsdp_plugin=FullyShardedDataParallelPlugin() if case.get("fsdp") else None,
    )
    torch.manual_seed(0)
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, gathered = [], 0
    for x, y in loader:
        with accelerator.accumulate(model):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            accelerator.backward(loss)
            if accelerator.sync_gradients and case.get("clip"):
                accelerator.clip_grad_norm_(model.parameters(), case["clip"])
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), "mean")))
        gathered += len(accelerator.gather(out.detach()))
    weights = {k: v.float() for k, v in accelerator.get_state_dict(model).items()}
    return {"losses": losses, "weights": weights, "gathered": gathered}


def compiled_against_eager(cases: dict) -> dict:
    results = {}
    for name, case in cases.items():
        eager, compiled = _run(case, compiled=False), _run(case, compiled=True)
        results[name] = {
            "eager": eager["losses"],
            "compiled": compiled["losses"],
            "weights": max(
                (float((compiled["weights"][k] - v).abs().max()) for k, v in eager["weights"].items()),
                default=0.0,
            ),  # the full state dict is on the main process only under FSDP2
            "gathered": compiled["gathered"],
        }
    return results


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_compiled_runs_give_eagers_losses_and_weights(engine):
    # One launch per engine: a process is set up for one distributed type.
    cases = {name: case for name, case in CASES.items() if name.startswith(engine)}
    results = run_on_ranks(compiled_against_eager, 2, cases, timeout=900)[0]
    assert results.keys() == cases.keys()
    for name, result in results.items():
        tolerance = cases[name].get("tolerance", 1e-4)
        assert result["compiled"] == pytest.approx(result["eager"], rel=tolerance, abs=1e-5), name
        weight_tolerance = cases[name].get("weight_tolerance", tolerance)
        assert result["weights"] <= weight_tolerance, f"{name}: weights differ by {result['weights']}"
        assert result["gathered"] == 64, f"{name}: gather of compiled outputs"


def test_a_second_launch_compiles_from_the_cache(tmp_path):
    import json
    from pathlib import Path

    from accel_launch.testing.ranks import launch_script

    script = Path(__file__).parent / "scripts" / "compile_once.py"
    env = {"ACCEL_COMPILE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    runs = []
    for _ in range(2):
        result = launch_script(script, 1, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["misses"] > 0 and cold["hits"] == 0, cold
    assert warm["hits"] >= cold["misses"] and warm["misses"] == 0, warm
    assert any((tmp_path / "cache").iterdir()), "the cache is in the folder accel chose"
