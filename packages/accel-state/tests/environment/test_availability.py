"""The availability probes answer with bools that match the environment, without importing packages."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys

import pytest
import torch

from accel_state.environment import availability

PROBES = sorted(
    name
    for name, value in vars(availability).items()
    if name.startswith("is_")
    and inspect.isfunction(value)
    and all(p.default is not p.empty for p in inspect.signature(value).parameters.values())
)


@pytest.mark.parametrize("name", PROBES)
def test_every_probe_returns_a_bool(name):
    assert type(getattr(availability, name)()) is bool


@pytest.mark.parametrize(
    ("probe", "module"),
    [
        ("is_deepspeed_available", "deepspeed"),
        ("is_wandb_available", "wandb"),
        ("is_rich_available", "rich"),
        ("is_safetensors_available", "safetensors"),
        ("is_datasets_available", "datasets"),
        ("is_transformers_available", "transformers"),
        ("is_peft_available", "peft"),
        ("is_torchao_available", "torchao"),
        ("is_torch_xla_available", "torch_xla"),
        ("is_aim_available", "aim"),
        ("is_dvclive_available", "dvclive"),
        ("is_clearml_available", "clearml"),
        ("is_comet_ml_available", "comet_ml"),
        ("is_mlflow_available", "mlflow"),
    ],
)
def test_package_probes_match_find_spec(probe, module):
    assert getattr(availability, probe)() == (importlib.util.find_spec(module) is not None)


def test_tensorboard_counts_tensorboard_or_tensorboardx():
    expected = any(importlib.util.find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))
    assert availability.is_tensorboard_available() == expected


def test_device_probes_ask_torch():
    assert availability.is_cuda_available() == torch.cuda.is_available()
    assert availability.is_torch_distributed_available() == torch.distributed.is_available()
    assert availability.is_fp16_available()
    if not torch.cuda.is_available():
        assert availability.is_bf16_available()


def test_probing_imports_none_of_the_probed_packages():
    code = (
        "import sys, accel_state.environment.availability as a\n"
        "[getattr(a, n)() for n in dir(a) if n.startswith('is_') and n.endswith('_available')]\n"
        "heavy = {'deepspeed', 'torch_xla', 'wandb', 'tensorboard', 'transformers', 'datasets', 'mlflow'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_backend_and_device_probes_answer_what_torch_says():
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    assert availability.is_rocm_available() == (torch.version.hip is not None and torch.cuda.is_available())
    assert availability.is_mpi_available() == dist.is_mpi_available()
    xccl = getattr(distributed_c10d, "is_xccl_available", None)
    assert availability.is_xccl_available() == bool(xccl is not None and xccl())
    if importlib.util.find_spec("habana_frameworks") is None:
        assert availability.is_habana_gaudi1() is False
    if not torch.cuda.is_available():
        assert availability.check_cuda_fp8_capability() is False


def test_version_helpers_compare_torch_and_installed_distributions():
    release = torch.__version__.split("+")[0]
    assert availability.is_torch_version("==", release)
    assert availability.is_torch_version(">=", "2.4") and not availability.is_torch_version("<", "2.4")
    assert availability.is_weights_only_available() is True  # accel needs torch >= 2.4
    assert availability.compare_versions("torch", ">=", "2.4")
    assert availability.compare_versions("1.2.3", "<", "1.10")
    with pytest.raises(ValueError, match="operation must be one of"):
        availability.compare_versions("1.0", "=>", "1.0")
