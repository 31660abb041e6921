"""Accelerate's module layout: `accel.utils`, `accel.logging`, `accel.local_sgd`, `accel.data_loader`
and `accel.state` hold the split packages' objects, and `import accel` imports none of them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

import accel_data
import accel_state
from accel_state.environment import availability

LAYOUT_MODULES = ("accel.utils", "accel.logging", "accel.local_sgd", "accel.data_loader", "accel.state")


def test_import_accel_imports_none_of_the_layout_modules():
    watched = (*LAYOUT_MODULES, "accel_state.environment.availability")
    code = f"import sys, accel\nprint([m for m in {watched!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_layout_modules_import():
    import accel.data_loader
    import accel.local_sgd
    import accel.logging
    import accel.state
    import accel.utils

    for module in (accel.utils, accel.logging, accel.local_sgd, accel.data_loader, accel.state):
        assert all(hasattr(module, name) for name in getattr(module, "__all__", []))


@pytest.mark.parametrize(
    "name",
    [
        "set_seed", "gather", "gather_object", "broadcast", "broadcast_object_list",
        "pad_across_processes", "send_to_device", "find_executable_batch_size", "release_memory",
        "DistributedType", "recursively_apply",
    ],
)  # fmt: skip
def test_utils_names_are_accel_states_objects(name):
    import accel.utils

    assert getattr(accel.utils, name) is getattr(accel_state, name)


def test_utils_configurations_are_the_umbrellas_objects():
    import accel
    import accel.utils

    assert accel.utils.ProjectConfiguration is accel.ProjectConfiguration
    assert accel.utils.DataLoaderConfiguration is accel.DataLoaderConfiguration


def test_utils_probes_are_the_availability_functions_and_tell_the_truth():
    import accel.utils

    probes = [name for name in accel.utils.__all__ if name.startswith("is_")]
    assert len(probes) >= 40
    for name in probes:
        assert getattr(accel.utils, name) is getattr(availability, name)
        arguments = (">=", "2.4") if name == "is_torch_version" else ()  # the one probe with arguments
        assert type(getattr(accel.utils, name)(*arguments)) is bool
    tensorboard = any(importlib.util.find_spec(m) is not None for m in ("tensorboard", "tensorboardX"))
    assert accel.utils.is_tensorboard_available() == tensorboard
    assert accel.utils.is_deepspeed_available() == (importlib.util.find_spec("deepspeed") is not None)
    assert accel.utils.is_wandb_available() == (importlib.util.find_spec("wandb") is not None)
    assert accel.utils.is_cuda_available() == torch.cuda.is_available()


def test_utils_reduce_averages_by_default_like_accelerates():
    import accel.utils

    accel_state.PartialState()
    value = torch.tensor([2.0, 4.0])
    assert torch.equal(accel.utils.reduce(value), value)  # the mean over one process
    assert torch.equal(accel.utils.reduce(value, reduction="sum", scale=0.5), value * 0.5)


def test_find_executable_batch_size_from_utils_halves_on_a_simulated_oom():
    import accel.utils

    tried = []

    @accel.utils.find_executable_batch_size(starting_batch_size=32)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size > 8:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return batch_size

    assert train() == 8 and tried == [32, 16, 8]


def test_logging_and_state_and_data_loader_names_are_the_split_packages_objects():
    import accel.data_loader
    import accel.logging
    import accel.state
    from accel_state.shared_state import process_logging

    assert accel.logging.get_logger is process_logging.get_logger
    assert accel.logging.MultiProcessAdapter is process_logging.MultiProcessAdapter
    for name in ("PartialState", "AcceleratorState", "GradientState", "DistributedType"):
        assert getattr(accel.state, name) is getattr(accel_state, name)
    for name in accel.data_loader.__all__:
        assert getattr(accel.data_loader, name) is getattr(accel_data, name)


def test_local_sgd_does_nothing_on_one_process():
    from accel import Accelerator
    from accel.local_sgd import LocalSGD

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    before = [p.detach().clone() for p in model.parameters()]
    with LocalSGD(accelerator, model, local_sgd_steps=1) as local_sgd:
        assert not local_sgd.enabled
        local_sgd.step()
        assert local_sgd.num_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="local_sgd_steps"):
        LocalSGD(accelerator, model, local_sgd_steps=0)
