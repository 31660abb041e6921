"""Compiled CPU dropout draws eager's float noise: the same masks as eager for the same seed (also
where dropout's input is a transposed view, as after attention), no bool mask saved, and no
`native_dropout` left to run."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config
import torch.nn.functional as F
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table

from accel_state.compilation.cpu_inductor import with_cpu_options
from accel_state.compilation.dropout_noise import draw_dropout_noise


def test_dropout_saves_float_noise_not_a_bool_mask():
    saved: list[torch.dtype] = []

    def partition(joint, joint_inputs, **kwargs):
        draw_dropout_noise(joint.graph)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def forward_compiler(module, _inputs):
        outputs = next(node for node in module.graph.nodes if node.op == "output").args[0]
        saved.extend(node.meta["val"].dtype for node in outputs if isinstance(node, torch.fx.Node))
        assert not any(node.target is torch.ops.aten.native_dropout.default for node in module.graph.nodes)
        return module

    def layer(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.dropout(F.linear(x, weight), 0.25, training=True)

    with torch._inductor.config.patch(fallback_random=True):  # accel's CPU default: dropout stays one op
        decompositions = select_decomp_table()
    compiled = aot_function(
        layer,
        fw_compiler=forward_compiler,
        bw_compiler=lambda module, _inputs: module,
        partition_fn=partition,
        decompositions=decompositions,
    )
    compiled(torch.randn(4, 8), torch.randn(6, 8, requires_grad=True)).sum().backward()
    assert saved and torch.bool not in saved


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_compiled_dropout_gives_eagers_outputs_whatever_its_inputs_layout(precision):
    torch.manual_seed(0)
    # batch_first attention hands dropout1 a transposed view: the draw must follow its memory order.
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.25, batch_first=True)
    compiled = torch.compile(layer, **with_cpu_options({"backend": "inductor"}, "cpu"))
    x = torch.randn(2, 8, 16)
    # bf16: the dropout stays torch's (fused, it would round once where eager rounds after each op).
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    with autocast:
        compiled(x)  # compiles: its tracing would show in the profile below
        torch.manual_seed(1)
        eager = layer(x)
        torch.manual_seed(1)
        with torch.profiler.profile() as profile:
            ours = compiled(x)
        assert (eager - layer.eval()(x)).abs().max() > 1e-2, "dropout must change the output for the test"
    torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-5)
    dropouts = [event for event in profile.events() if event.name == "aten::native_dropout"]
    assert len(dropouts) == (0 if precision == "fp32" else 3)
