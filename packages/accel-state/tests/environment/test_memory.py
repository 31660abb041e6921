"""`find_executable_batch_size` halves the batch on out-of-memory errors; `release_memory` frees."""

from __future__ import annotations

import pytest
import torch

from accel_state import find_executable_batch_size, release_memory
from accel_state.environment.memory import should_reduce_batch_size


def test_a_cuda_out_of_memory_halves_the_batch_until_it_fits():
    tried = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size, scale):
        tried.append(batch_size)
        if batch_size > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * scale

    assert train(2) == 32
    assert tried == [128, 64, 32, 16]


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried"
        ),
        torch.cuda.OutOfMemoryError("CUDA out of memory."),
    ],
)
def test_cpu_and_cuda_memory_errors_count_as_out_of_memory(error):
    tried = []

    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size == 8:
            raise error
        return batch_size

    assert train() == 4 and tried == [8, 4]
    assert should_reduce_batch_size(error)


def test_other_errors_propagate_and_the_bare_decorator_starts_at_128():
    @find_executable_batch_size
    def train(batch_size):
        raise ValueError(f"bad input at {batch_size}")

    with pytest.raises(ValueError, match="at 128"):
        train()


def test_reaching_zero_is_an_error_and_passing_the_batch_size_is_refused():
    @find_executable_batch_size(starting_batch_size=2)
    def never_fits(batch_size):
        raise MemoryError

    with pytest.raises(RuntimeError, match="reached zero"):
        never_fits()

    @find_executable_batch_size(starting_batch_size=2)
    def train(batch_size):
        return batch_size

    with pytest.raises(TypeError, match="first argument"):
        train(4)


def test_release_memory_returns_one_none_per_object():
    model, tensor = torch.nn.Linear(2, 2), torch.ones(3)
    model, tensor = release_memory(model, tensor)
    assert model is None and tensor is None
    assert release_memory() == []


@pytest.mark.parametrize(
    "message",
    [
        "HIP out of memory. Tried to allocate 20.00 MiB",
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
    ],
)
def test_every_device_allocators_out_of_memory_counts(message):
    assert should_reduce_batch_size(RuntimeError(message))
    assert not should_reduce_batch_size(RuntimeError("shape mismatch: out of range"))
