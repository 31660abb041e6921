"""The XLA suite runs on XLA's CPU device: one replica unless a test starts replicas itself."""

from __future__ import annotations

import os

import pytest

# Before torch_xla is imported: the runtime reads them once.
os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "1")

pytest.importorskip("torch_xla")
