"""Splits a list, tuple, tensor or dict of them into contiguous per-process shares."""

from __future__ import annotations

from typing import Any

import torch


def _share_bounds(length: int, index: int, parts: int) -> tuple[int, int]:
    """Return [start, end) of share `index`; the first `length % parts` shares get one more item."""
    base, extra = divmod(length, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def split_for_process(inputs: Any, index: int, parts: int, apply_padding: bool = False) -> Any:
    """Return process `index`'s share; with `apply_padding`, shorter shares repeat their last item."""
    if parts == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            sizes = {k: len(v) for k, v in inputs.items()}
            raise ValueError(f"split_between_processes: dict values differ in length: {sizes}")
        return {k: split_for_process(v, index, parts, apply_padding) for k, v in inputs.items()}
    length = len(inputs)
    start, end = _share_bounds(length, index, parts)
    share = inputs[start:end]
    if apply_padding:
        longest = -(-length // parts)
        missing = longest - (end - start)
        if missing > 0 and length > 0:
            filler = inputs[-1:] if end - start == 0 else share[-1:]
            if isinstance(share, torch.Tensor):
                share = torch.cat([share] + [filler] * missing)
            else:
                share = share + type(share)(filler) * missing
    return share
