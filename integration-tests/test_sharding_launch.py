"""Every sample is seen exactly once per epoch through gather_for_metrics, on 2 and 3 real ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing import run_on_ranks

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
