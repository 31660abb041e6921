"""Behaviours scripts written for Accelerate rely on, checked on 2 real gloo ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

# A short timeout turns a rank left waiting into a failure in a minute, not in half an hour.
ENV = {"ACCEL_TIMEOUT": "60"}


def _collectives_of_grad_tensors(debug):
    """Run each collective on tensors that require grad; return what each rank got back."""
    import os

    import torch

    import accel_state as st

    os.environ["ACCEL_DEBUG_MODE"] = debug
    state = st.PartialState()
    rank = state.process_index
    small = torch.full((2, 3), float(rank + 1), requires_grad=True)
    large = torch.full((300, 4), float(rank + 1), requires_grad=True)  # too large to travel inline
    scalar = (small * 2).sum()  # a non-leaf with a grad_fn
    uneven = torch.ones(rank + 1, 2, requires_grad=True)
    results = {
        "gather_small": st.gather(small),
        "gather_large": st.gather(large),
        "gather_scalar": st.gather(scalar),
        "gather_nested": st.gather({"a": small, "b": [scalar]}),
        "gather_uneven": st.gather_uneven(uneven),
        "pad": st.pad_across_processes(uneven),
        "reduce": st.reduce(small),
        "broadcast": st.broadcast(torch.full((2,), float(rank), requires_grad=True)),
        "broadcast_large": st.broadcast(torch.full((400,), float(rank), requires_grad=True)),
    }
    flat = {}
    for name, value in results.items():
        leaves = [value] if isinstance(value, torch.Tensor) else [value["a"], value["b"][0]]
        flat[name] = [(leaf.requires_grad, leaf.detach().tolist()) for leaf in leaves]
    return flat


@pytest.mark.parametrize("debug", ["0", "1"])
def test_collectives_accept_tensors_that_require_grad_on_2_ranks(debug):
    per_rank = run_on_ranks(_collectives_of_grad_tensors, 2, debug, env=ENV)
    first, second = per_rank
    pads = first.pop("pad"), second.pop("pad")
    assert pads == ([(False, [[1.0, 1.0], [0.0, 0.0]])], [(False, [[1.0, 1.0], [1.0, 1.0]])])
    assert first == second
    assert all(not requires_grad for leaves in first.values() for requires_grad, _ in leaves)
    assert first["gather_small"][0][1] == [[1.0] * 3] * 2 + [[2.0] * 3] * 2
    assert first["gather_scalar"][0][1] == [12.0, 24.0]
    assert first["gather_uneven"][0][1] == [[1.0, 1.0]] * 3
    assert first["reduce"][0][1] == [[3.0] * 3] * 2
    assert first["broadcast"][0][1] == [0.0, 0.0]
    assert first["broadcast_large"][0][1] == [0.0] * 400


def _reduce_max_and_min():
    import torch

    import accel_state as st

    rank = st.PartialState().process_index
    tensor = torch.tensor([float(rank), 10.0 - rank, 5.0])
    return {
        "max": st.reduce(tensor, reduction="max").tolist(),
        "min": st.reduce({"t": tensor}, reduction="min", scale=2.0)["t"].tolist(),
        "int_max": st.reduce(torch.tensor([rank * 3, -rank]), reduction="max").tolist(),
    }


def test_reduce_max_and_min_on_2_ranks():
    expected = {"max": [1.0, 10.0, 5.0], "min": [0.0, 18.0, 10.0], "int_max": [3, 0]}
    assert run_on_ranks(_reduce_max_and_min, 2, env=ENV) == [expected, expected]


def _reduce_with_different_reductions():
    import torch

    import accel_state as st
    from accel import DistributedOperationException  # Accelerate's name for it

    rank = st.PartialState().process_index
    try:
        st.reduce(torch.ones(2), reduction="max" if rank == 0 else "sum")
    except DistributedOperationException as error:
        return str(error)
    return "no error"


def test_reduce_max_on_one_rank_and_sum_on_the_other_is_refused_on_every_rank_on_2_ranks():
    messages = run_on_ranks(_reduce_with_different_reductions, 2, env=ENV)
    assert all("reduction='max'" in m and "reduction='sum'" in m for m in messages), messages


class ListIndexed:
    """A map-style dataset answering a list of indices with one batch, as Hugging Face datasets do."""

    def __init__(self, length):
        import torch

        self.data = torch.arange(length)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return {"x": self.data[index]}


def _batch_sampler_as_sampler_samples():
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from accel import Accelerator

    torch.manual_seed(1234)
    accelerator = Accelerator(cpu=True)
    dataset = ListIndexed(24)
    loader = DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), 4, False), batch_size=None)
    loader = accelerator.prepare(loader)
    epochs = []
    for _ in range(2):
        batches = [accelerator.gather(batch["x"]).tolist() for batch in loader]
        epochs.append(batches)
    return epochs


def test_batch_sampler_given_as_sampler_sees_the_same_samples_on_1_and_2_ranks():
    (single,) = run_on_ranks(_batch_sampler_as_sampler_samples, 1, env=ENV)
    first, second = run_on_ranks(_batch_sampler_as_sampler_samples, 2, env=ENV)
    assert first == second
    # Each step of 2 ranks gathers two of the one-process batches, in order.
    for one_process, two_ranks in zip(single, first, strict=True):
        assert [i for step in two_ranks for i in step] == [i for batch in one_process for i in batch]
        assert sorted(i for batch in one_process for i in batch) == list(range(24))


class Stream:
    """An iterable dataset of 6 pairs of floats."""

    def __iter__(self):
        import torch

        return iter(torch.arange(12.0).view(6, 2))


def _join_with_an_iterable_loader():
    import warnings

    import torch
    from torch.utils.data import DataLoader, IterableDataset

    from accel import Accelerator

    class IterableStream(Stream, IterableDataset):
        pass

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    stream = DataLoader(IterableStream(), batch_size=2)
    table = DataLoader(torch.arange(20.0).view(10, 2), batch_size=4)
    model, optimizer, stream, table = accelerator.prepare(model, optimizer, stream, table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            batches = 0
            for batch in table:
                optimizer.zero_grad()
                accelerator.backward(model(batch).pow(2).mean())
                optimizer.step()
                batches += 1
            inside = table.batch_sampler.even_batches
    messages = [str(w.message) for w in caught if "even_batches" in str(w.message)]
    return {
        "batches": batches,
        "inside": inside,
        "after": table.batch_sampler.even_batches,
        "warned": messages,
    }


def test_join_uneven_inputs_leaves_iterable_loaders_alone_with_a_warning_on_2_ranks():
    first, second = run_on_ranks(_join_with_an_iterable_loader, 2, env=ENV)
    assert (first["batches"], second["batches"]) == (2, 1)
    for rank in (first, second):
        assert rank["inside"] is False and rank["after"] is True
        assert len(rank["warned"]) == 1 and "IterableStream" in rank["warned"][0], rank["warned"]
