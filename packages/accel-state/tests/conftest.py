"""Fixtures shared by the folders of accel-state's tests."""

from __future__ import annotations

import pytest

from accel_state.seam import backend as backend_module


@pytest.fixture
def backend_registry(monkeypatch):
    """Restore the backend registry around the test, and let only accel-state's own entry points
    answer (plus those the test puts into the returned dict, by distributed type name), so that
    installed adapters do not."""
    saved = dict(backend_module._registry)
    own = {
        name: entry
        for name, entry in backend_module._installed().items()
        if backend_module._distribution(entry) == "accel-state"
    }
    added: dict = {}
    monkeypatch.setattr(backend_module, "_own_entry_points", lambda: own)
    monkeypatch.setattr(backend_module, "_installed", lambda: {**own, **added})
    try:
        yield added
    finally:
        backend_module._registry.clear()
        backend_module._registry.update(saved)
