"""What the forward saves for the backward with and without the mask rewrite: the partition inductor
would make (its decompositions, the min-cut partitioner), without building kernels."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch.utils.checkpoint import CheckpointPolicy

from accel_state.compilation.joint_pass import CpuJointGraphPass
from accel_state.compilation.saved_masks import recompute_masks


def saved_dtypes(function: Callable[..., torch.Tensor], *args: torch.Tensor, with_rewrite: bool) -> list:
    """Return the dtypes of the tensors the forward of `function` saves for its backward."""
    saved: list = []

    def partition(joint, joint_inputs, **kwargs):
        if with_rewrite:
            recompute_masks(joint.graph)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def forward_compiler(module: torch.fx.GraphModule, _inputs: list) -> Callable:
        outputs = next(node for node in module.graph.nodes if node.op == "output").args[0]
        values = [node.meta.get("val") for node in outputs if isinstance(node, torch.fx.Node)]
        saved.extend(value.dtype for value in values if isinstance(value, torch.Tensor))
        return module

    compiled = aot_function(
        function,
        fw_compiler=forward_compiler,
        bw_compiler=lambda module, _inputs: module,
        partition_fn=partition,
        decompositions=select_decomp_table(),
    )
    compiled(*args).sum().backward()
    return saved


def two_layers(x: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    # The encoder's feed-forward: linear (a view of a 3-D input), ReLU, linear.
    return F.linear(torch.relu(F.linear(x, up)), down)


def random_mask(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    hidden = F.linear(x, weight)
    return torch.where(torch.rand_like(hidden) > 0.5, hidden, 0.0)


def test_relu_saves_the_float_it_compares_not_a_bool_mask():
    x = torch.randn(4, 8, 8)
    up, down = torch.randn(16, 8, requires_grad=True), torch.randn(4, 16, requires_grad=True)
    assert torch.bool in saved_dtypes(two_layers, x, up, down, with_rewrite=False), (
        "without the pass the partitioner must save ReLU's mask for the test to see it go"
    )
    assert torch.bool not in saved_dtypes(two_layers, x, up, down, with_rewrite=True)


def test_a_mask_drawn_from_random_numbers_stays_saved():
    # Recomputing it would save the random floats instead: four times the bytes.
    x, weight = torch.randn(4, 8, 8), torch.randn(16, 8, requires_grad=True)
    assert saved_dtypes(random_mask, x, weight, with_rewrite=True).count(torch.bool) == 1


def test_a_policy_already_on_a_node_is_kept():
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    value.meta["val"] = torch.empty(4)
    mask = graph.call_function(torch.ops.aten.le.Scalar, (value, 0))
    mask.meta["val"] = torch.empty(4, dtype=torch.bool)
    mask.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    other = graph.call_function(torch.ops.aten.gt.Scalar, (value, 0))
    other.meta["val"] = torch.empty(4, dtype=torch.bool)
    graph.output((mask, other))
    recompute_masks(graph)
    assert mask.meta["recompute"] is CheckpointPolicy.MUST_SAVE
    assert other.meta["recompute"] is CheckpointPolicy.MUST_RECOMPUTE


def test_the_pass_names_its_code_for_inductors_cache():
    assert CpuJointGraphPass().uuid() == CpuJointGraphPass().uuid() is not None
