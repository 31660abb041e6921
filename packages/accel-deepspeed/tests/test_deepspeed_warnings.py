"""DeepSpeed's own deprecation warnings are kept out of a run's output; the user's are not.
No DeepSpeed process is started (DeepSpeed's comm backend is a stand-in)."""

from __future__ import annotations

import sys
import types
import warnings

import torch.distributed

from accel_deepspeed import quiet_warnings as deepspeed_warnings


def _shown(module: str, category: type[Warning]) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("old API", category, f"/{module.replace('.', '/')}.py", 1, module=module)
    return bool(caught)


def test_only_deprecations_raised_in_deepspeeds_modules_are_ignored(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(deepspeed_warnings, "_installed", False)
        deepspeed_warnings.ignore_deepspeed_deprecations()
        assert not _shown("deepspeed.runtime.engine", FutureWarning)
        assert not _shown("deepspeed", DeprecationWarning)
        assert _shown("deepspeed.runtime.engine", UserWarning)  # not a deprecation: still shown
        assert _shown("train", FutureWarning)  # the user's script
        assert _shown("deepspeed_helpers", FutureWarning)  # another package, not deepspeed's
        assert _shown("torch.distributed.c10d_logger", FutureWarning)


def test_deepspeeds_comm_backend_calls_the_collectives_torch_recommends(monkeypatch):
    backend = types.SimpleNamespace(
        all_gather_function=torch.distributed.all_gather_into_tensor,
        reduce_scatter_function=torch.distributed.reduce_scatter_tensor,
    )
    monkeypatch.setitem(sys.modules, "deepspeed.comm.comm", types.SimpleNamespace(cdb=backend))
    deepspeed_warnings.use_current_collectives()
    assert backend.all_gather_function is torch.distributed.all_gather_single
    assert backend.reduce_scatter_function is torch.distributed.reduce_scatter_single
