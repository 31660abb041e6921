"""Keeps DeepSpeed's own deprecation warnings out of a training script's output.

DeepSpeed calls torch APIs that torch has deprecated and warns of its own deprecations; a ZeRO-3
run of a few epochs printed hundreds of such FutureWarnings, none about the user's code and none
the user can act on. Two kinds, two remedies, neither hiding a warning about the user's code:

- a warning attributed to a deepspeed module is ignored (a filter on the warning's module);
- torch's deprecation of `all_gather_into_tensor` and `reduce_scatter_tensor` is attributed to
  torch's own wrapper whoever calls them, so no filter could tell DeepSpeed's calls from the
  user's: DeepSpeed's comm backend is pointed at the functions those names forward to instead
  (`all_gather_single`, `reduce_scatter_single`: the same collective, without the warning).
"""

from __future__ import annotations

import sys
import warnings

# A deepspeed module, or the package itself (matched against the warning's module name).
_DEEPSPEED_MODULES = r"deepspeed(\.|$)"
# DeepSpeed's comm backend attribute -> the torch function it should call (torch 2.13 names).
_CURRENT_COLLECTIVES = {
    "all_gather_function": "all_gather_single",
    "reduce_scatter_function": "reduce_scatter_single",
}
_installed = False


def ignore_deepspeed_deprecations() -> None:
    """Ignore FutureWarning and DeprecationWarning raised from deepspeed's modules (once per process).

    Call it before deepspeed is imported: many are raised at import time.
    """
    global _installed
    if _installed:
        return  # adding a filter again would reset warnings' once-per-place memory
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=_DEEPSPEED_MODULES)
    _installed = True


def use_current_collectives() -> None:
    """Point DeepSpeed's torch comm backend (once it exists) at torch's non-deprecated collectives."""
    import torch.distributed

    comm = sys.modules.get("deepspeed.comm.comm")
    backend = getattr(comm, "cdb", None)
    if backend is None:
        return
    for attribute, name in _CURRENT_COLLECTIVES.items():
        current = getattr(torch.distributed, name, None)
        if current is not None and getattr(backend, attribute, None) is not None:
            setattr(backend, attribute, current)
