"""The joint-graph pass accel gives inductor for a model on the CPU: eager's dropout noise, then masks
recomputed in the backward instead of stored (`dropout_noise`, `saved_masks`).

Inductor takes one joint-graph pass; its `uuid` names the code of all three modules, so inductor's
cache key changes with them and a warm start reuses kernels built by this same code only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from accel_state.compilation.dropout_noise import draw_dropout_noise
from accel_state.compilation.saved_masks import recompute_masks

_FOLDER = Path(__file__).parent
_SOURCES = tuple(str(_FOLDER / name) for name in ("joint_pass.py", "dropout_noise.py", "saved_masks.py"))


class CpuJointGraphPass(CustomGraphPass):
    """Rewrite a joint forward-backward graph for the CPU before inductor partitions it."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        draw_dropout_noise(graph)  # first: it removes dropout's bool masks
        recompute_masks(graph)

    def uuid(self) -> Any:
        """Identify this pass's code in inductor's cache key, so a warm start reuses its kernels."""
        return get_hash_for_files(_SOURCES)
