"""Compiled CPU dropout keeps eager's float noise instead of torch's bool mask.

Traced dropout becomes `native_dropout`, which on the CPU draws a bool mask, converts it to floats to
scale the input, and converts it again in the backward; eager dropout draws float noise once and
multiplies. Inductor leaves `native_dropout` to torch when its random numbers come from torch's
generator (`fallback_random`, accel's CPU default), and its conversions are passes of their own over
the activations (512 x 1024 floats: `native_dropout` 4.1 ms, its float draw alone 3.1 ms).

This rewrite draws the noise as eager does (`bernoulli` with the keep probability) and leaves the
scaling to inductor's fused kernels, forward and backward; the backward keeps the float noise, as
eager autograd does, instead of the bool mask. The draw fills memory in the order eager's does (the
input's stride order: inductor would lay a fresh buffer out row-major, so the noise is drawn in the
input's memory order and permuted back), so the same seed gives eager's masks. fp32 and fp64 only:
see `EXACT_DTYPES`.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

_aten = torch.ops.aten
_prims = torch.ops.prims

#: Where the fused scaling rounds as native_dropout's does. In bf16 and fp16 inductor would fuse the
#: dropout with its neighbours and round once where eager rounds after each op (0.3-0.7% apart on a
#: bf16 encoder layer), so there native_dropout stays, and its outputs equal eager's.
EXACT_DTYPES = frozenset({torch.float32, torch.float64})


def draw_dropout_noise(graph: torch.fx.Graph) -> None:
    """Replace each training `native_dropout` whose mask is only read as floats by float noise."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is _aten.native_dropout.default:
            _rewrite(graph, node)


def _rewrite(graph: torch.fx.Graph, dropout: torch.fx.Node) -> None:
    source, probability = dropout.args[0], dropout.args[1]
    train = dropout.args[2] if len(dropout.args) > 2 else dropout.kwargs.get("train")
    if train is not True or not isinstance(probability, float) or not 0.0 <= probability < 1.0:
        return
    if not isinstance(source, torch.fx.Node):
        return
    value = source.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype not in EXACT_DTYPES:
        return
    order = _memory_order(value)
    if order is None:
        return
    outputs = {user.args[1]: user for user in dropout.users if user.target is operator.getitem}
    if len(outputs) != len(dropout.users) or 0 not in outputs:
        return
    mask_reads = list(outputs[1].users) if 1 in outputs else []
    if not all(_reads_as(read, value.dtype) for read in mask_reads):
        return
    keep = 1.0 - probability
    with graph.inserting_before(dropout):
        noise = _draw(graph, source, value, order, keep)
        # native_dropout's order, (input * noise) * scale: the same rounding in bf16 and fp16
        kept = _call(graph, _aten.mul.Tensor, (source, noise), outputs[0].meta["val"])
        dropped = _call(graph, _aten.mul.Tensor, (kept, 1.0 / keep), outputs[0].meta["val"])
    outputs[0].replace_all_uses_with(dropped)
    for read in mask_reads:
        read.replace_all_uses_with(noise)
        graph.erase_node(read)
    for output in outputs.values():
        graph.erase_node(output)
    graph.erase_node(dropout)


def _draw(graph: torch.fx.Graph, source: torch.fx.Node, value: torch.Tensor, order: list[int],
          keep: float) -> torch.fx.Node:  # fmt: skip
    """Return a node drawing noise shaped like `value`, its elements drawn in `value`'s memory order."""
    if order == list(range(value.dim())):
        drawn = torch.empty_like(value, memory_format=torch.contiguous_format)
        return _call(graph, _aten.bernoulli.p, (source, keep), drawn)
    back = sorted(range(len(order)), key=order.__getitem__)
    permuted = _call(graph, _aten.permute.default, (source, order), value.permute(order))
    drawn = torch.empty_like(value.permute(order), memory_format=torch.contiguous_format)
    noise = _call(graph, _aten.bernoulli.p, (permuted, keep), drawn)
    return _call(graph, _aten.permute.default, (noise, back), drawn.permute(back))


def _memory_order(value: torch.Tensor) -> list[int] | None:
    """Return `value`'s dimensions from outermost to innermost in memory, None unless dense and static."""
    sizes, strides = value.shape, value.stride()
    if not all(isinstance(number, int) for number in (*sizes, *strides)):
        return None  # a dynamic shape: its sizes are the graph's symbols, left to native_dropout
    order = sorted(range(value.dim()), key=lambda dim: -strides[dim])
    expected = 1
    for dim in reversed(order):
        if sizes[dim] != 1 and strides[dim] != expected:
            return None
        expected *= sizes[dim]
    return order


def _reads_as(node: torch.fx.Node, dtype: torch.dtype) -> bool:
    """True when `node` converts the mask to `dtype` (the backward's only use of it)."""
    return node.target is _prims.convert_element_type.default and node.args[1] == dtype


def _call(graph: torch.fx.Graph, target: object, args: tuple, value: torch.Tensor) -> torch.fx.Node:
    node = graph.call_function(target, args)  # type: ignore[arg-type]
    node.meta["val"] = value
    return node
