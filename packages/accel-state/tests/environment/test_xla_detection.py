"""An XLA run is detected when torch_xla is importable and an XLA device is configured, never
merely because torch_xla is installed."""

from __future__ import annotations

import importlib.util

import pytest

from accel_state import DistributedType, resolve_distributed_type
from accel_state.environment import distributed_type as detection


@pytest.fixture
def torch_xla_installed(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return object() if name == "torch_xla" else real(name, *args, **kwargs)

    monkeypatch.setattr(detection.importlib.util, "find_spec", find_spec)


@pytest.fixture
def no_tpu(monkeypatch):
    monkeypatch.setattr(detection.glob, "glob", lambda pattern: [])


def test_pjrt_device_with_torch_xla_is_an_xla_run(monkeypatch, torch_xla_installed, no_tpu):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert resolve_distributed_type() is DistributedType.XLA


def test_torch_xla_installed_alone_is_not_an_xla_run(monkeypatch, torch_xla_installed, no_tpu):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert resolve_distributed_type() is DistributedType.NO


def test_a_tpu_with_torch_xla_is_an_xla_run(monkeypatch, torch_xla_installed):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    monkeypatch.setattr(detection.glob, "glob", lambda pattern: ["/dev/accel0"] if "accel" in pattern else [])
    assert resolve_distributed_type() is DistributedType.XLA


def test_pjrt_device_without_torch_xla_is_not_an_xla_run(monkeypatch, no_tpu):
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setattr(detection.importlib.util, "find_spec", lambda name, *a, **k: None)
    assert resolve_distributed_type() is DistributedType.NO


def test_asking_for_the_cpu_or_a_type_overrides_detection(monkeypatch, torch_xla_installed, no_tpu):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert resolve_distributed_type(cpu=True) is DistributedType.NO
    assert resolve_distributed_type("MULTI_CPU") is DistributedType.MULTI_CPU
    monkeypatch.setenv("ACCEL_DISTRIBUTED_TYPE", "NO")
    assert resolve_distributed_type() is DistributedType.NO
