"""Every sample is seen exactly once per epoch through gather_for_metrics, on 2 and 3 real ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

CASES = [
    # dataset size, batch size, split_batches, shuffle, even_batches, drop_last
    (64, 8, False, False, True, False),
    (37, 4, False, True, True, False),
    (5, 4, False, False, True, False),
    (48, 12, True, True, True, False),
    (50, 6, True, False, True, False),
    (1, 3, False, False, True, False),
    # Uneven last batches (same number of batches on every rank, for 2 and 3 ranks alike).
    (16, 3, False, True, False, False),
    (11, 6, True, False, False, False),
    (37, 4, False, True, True, True),
]


def expected_items(size, batch_size, split_batches, drop_last, num_processes):
    """The sample indices one epoch yields in total (drop_last drops incomplete rounds)."""
    if not drop_last:
        return size
    global_batch = batch_size if split_batches else batch_size * num_processes
    return size // global_batch * global_batch


def gather_every_case(cases):
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator

    outcomes = []
    for size, batch_size, split_batches, shuffle, even_batches, drop_last in cases:
        accelerator = Accelerator(split_batches=split_batches, even_batches=even_batches)
        raw = DataLoader(torch.arange(size), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
        loader = accelerator.prepare(raw)
        for epoch in range(2):
            seen, objects, local_batches = [], [], 0
            for batch in loader:
                local_batches += 1
                seen.extend(accelerator.gather_for_metrics(batch).tolist())
                objects.extend(accelerator.gather_for_metrics([f"item-{i}" for i in batch.tolist()]))
            counts = accelerator.gather(torch.tensor([local_batches])).tolist()
            outcomes.append(
                {"case": (size, batch_size, split_batches, shuffle, even_batches, drop_last, epoch),
                 "seen": seen, "counts": counts,
                 "len": len(loader), "objects": objects}
            )  # fmt: skip
    return outcomes


@pytest.mark.parametrize("num_processes", [2, 3])
def test_each_item_exactly_once_launch(num_processes):
    per_rank = run_on_ranks(gather_every_case, num_processes, CASES)
    for outcomes in zip(*per_rank, strict=True):
        first = outcomes[0]
        size, batch_size, split_batches, _, _, drop_last, _ = first["case"]
        total = expected_items(size, batch_size, split_batches, drop_last, num_processes)
        for outcome in outcomes:
            seen = outcome["seen"]
            assert len(seen) == total and len(set(seen)) == total, outcome["case"]
            assert set(seen) <= set(range(size)), outcome["case"]
            assert sorted(outcome["objects"]) == sorted(f"item-{i}" for i in seen), outcome["case"]
            # Every rank ran the same number of batches, and len() said so.
            assert outcome["counts"] == [outcome["len"]] * num_processes, outcome["case"]
            assert seen == first["seen"]


def shuffled_order(size, batch_size, epochs):
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator, set_seed

    set_seed(1234)
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(size), batch_size=batch_size, shuffle=True))
    return [[i for batch in loader for i in accelerator.gather(batch).tolist()] for _ in range(epochs)]


def test_global_order_does_not_depend_on_process_count_launch():
    (single,) = run_on_ranks(shuffled_order, 1, 48, 8, 2)
    double = run_on_ranks(shuffled_order, 2, 48, 4, 2)
    assert double[0] == double[1] == single
    assert single[0] != single[1], "each epoch should shuffle anew"


def custom_sampler_epochs(seed_per_rank):
    import torch
    from torch.utils.data import DataLoader, SubsetRandomSampler, WeightedRandomSampler

    from accel import Accelerator, PartialState

    # Different global seeds on each rank, as unseeded processes have: the sampler must agree anyway.
    torch.manual_seed(seed_per_rank + PartialState().process_index)
    accelerator = Accelerator()
    subset = DataLoader(torch.arange(100), batch_size=5, sampler=SubsetRandomSampler(list(range(0, 100, 3))))
    weighted = DataLoader(torch.arange(30), batch_size=4, sampler=WeightedRandomSampler([1.0] * 30, 24))
    subset, weighted = accelerator.prepare(subset, weighted)
    epochs = []
    for _ in range(2):
        epochs.append(
            {
                "subset": [i for b in subset for i in accelerator.gather_for_metrics(b).tolist()],
                "weighted": [i for b in weighted for i in accelerator.gather(b).tolist()],
            }
        )
    return epochs


def test_samplers_with_their_own_generator_agree_across_ranks_launch():
    per_rank = run_on_ranks(custom_sampler_epochs, 2, 10)
    assert per_rank[0] == per_rank[1]
    first, second = per_rank[0]
    assert sorted(first["subset"]) == list(range(0, 100, 3))
    assert first["subset"] != second["subset"], "each epoch draws a new order"
    assert len(first["weighted"]) == 24


def default_shuffle_epochs(seed_per_rank, use_seedable_sampler, batch_size):
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    from accel import Accelerator, DataLoaderConfiguration, PartialState
    from accel.data_loader import SeedableRandomSampler

    # Ranks seeded differently (or, on one process, as rank 0 is): the main process's order wins.
    torch.manual_seed(seed_per_rank + PartialState().process_index)
    config = DataLoaderConfiguration(use_seedable_sampler=use_seedable_sampler)
    accelerator = Accelerator(dataloader_config=config)
    shuffled = DataLoader(torch.arange(30), batch_size=batch_size, shuffle=True)
    with_generator = DataLoader(
        torch.arange(30), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    seedable = DataLoader(
        torch.arange(30), batch_size=batch_size, sampler=SeedableRandomSampler(range(30), data_seed=5)
    )
    loaders = accelerator.prepare(shuffled, with_generator, seedable)
    sampler = loaders[0].batch_sampler.batch_sampler.sampler
    epochs = [
        [[i for b in loader for i in accelerator.gather_for_metrics(b).tolist()] for loader in loaders]
        for _ in range(3)
    ]
    return {
        "epochs": epochs,
        "sampler": type(sampler).__name__,
        "is_random": isinstance(sampler, RandomSampler),
    }


@pytest.mark.parametrize("use_seedable_sampler", [False, True])
def test_shuffled_loaders_agree_across_ranks_and_with_one_process_launch(use_seedable_sampler):
    (single,) = run_on_ranks(default_shuffle_epochs, 1, 20, use_seedable_sampler, 6)
    double = run_on_ranks(default_shuffle_epochs, 2, 20, use_seedable_sampler, 3)
    assert double[0] == double[1], "every rank sees the same global order"
    assert double[0]["epochs"] == single["epochs"], "2 processes of batch 3 train as 1 of batch 6"
    for epochs in zip(*single["epochs"], strict=True):  # per loader: each epoch shuffles anew
        assert all(sorted(epoch) == list(range(30)) for epoch in epochs)
        assert epochs[0] != epochs[1] != epochs[2]
    assert single["is_random"]
    expected = "SeedableRandomSampler" if use_seedable_sampler else "SynchronizedRandomSampler"
    assert single["sampler"] == expected
