"""torch.compile under the DeepSpeed backend, on 2 real CPU processes (gloo): every ZeRO stage
compiled (whole and by region) gives the losses and weights of the same engine run eagerly.

Runs in the nox session `engines(backend='deepspeed')`; elsewhere it skips, saying why. The cases
share one job and compile with `aot_eager` (dynamo's graphs and autograd's, without inductor's C++
builds, slow on 2 cores); one case compiles with inductor.
"""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytest.importorskip(
    "deepspeed", reason="DeepSpeed is not installed: they run in the nox session engines(backend='deepspeed')"
)
pytestmark = pytest.mark.slow

DS_ENV = {"ACCEL_DISTRIBUTED_TYPE": "DEEPSPEED", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
TOLERANCE = 1e-4
CASES = [
    {"stage": 0, "backend": "aot_eager"},
    {"stage": 1, "backend": "aot_eager"},
    {"stage": 2, "backend": "aot_eager", "accumulation": 2, "clip": 0.05},
    {"stage": 3, "backend": "aot_eager"},
    {"stage": 3, "backend": "aot_eager", "regional": True},
    {"stage": 0, "backend": "inductor", "regional": True},
]


def _run(case: dict, compiled: bool) -> dict:
    import torch
    import torch._dynamo.utils

    from accel import Accelerator, DeepSpeedPlugin
    from accel.utils import TorchDynamoPlugin
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.up, self.down = (
                torch.nn.LayerNorm(16),
                torch.nn.Linear(16, 32),
                torch.nn.Linear(32, 16),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), *(Block() for _ in range(3)), torch.nn.Linear(16, 1))
    plugin = TorchDynamoPlugin(
        backend=case["backend"] if compiled else "no", use_regional_compilation=case.get("regional", False)
    )
    accumulation = case.get("accumulation", 1)
    accelerator = Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(zero_stage=case["stage"], gradient_accumulation_steps=accumulation),
        gradient_accumulation_steps=accumulation,
        dynamo_plugin=plugin,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=generator)
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
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return {"losses": losses, "weights": weights, "gathered": gathered, "graphs": graphs}


def compiled_against_eager(cases: list[dict]) -> list[dict]:
    results = []
    for case in cases:
        eager, compiled = _run(case, compiled=False), _run(case, compiled=True)
        difference = max(float((compiled["weights"][k] - v).abs().max()) for k, v in eager["weights"].items())
        results.append(
            {
                "eager": eager["losses"],
                "compiled": compiled["losses"],
                "weights": difference,
                "gathered": compiled["gathered"],
                "graphs": compiled["graphs"],
                "eager_graphs": eager["graphs"],
            }
        )
    return results


def test_every_zero_stage_compiled_gives_the_eager_engines_losses_and_weights():
    results = run_on_ranks(compiled_against_eager, 2, CASES, env=DS_ENV, timeout=900)[0]
    for case, result in zip(CASES, results, strict=True):
        assert result["eager_graphs"] == 0, f"{case}: the eager run compiled something"
        assert result["graphs"] > 0, f"{case}: dynamo compiled no graph"
        assert result["compiled"] == pytest.approx(result["eager"], rel=TOLERANCE, abs=1e-6), case
        assert result["weights"] <= TOLERANCE, f"{case}: weights differ by {result['weights']}"
        assert result["gathered"] == 64, f"{case}: gather of compiled outputs"
