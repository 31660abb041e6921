"""Every sample is seen exactly once per epoch through gather_for_metrics, on 2 and 3 real ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing import run_on_ranks

CASES = [
    # dataset size, batch size, split_batches, shuffle
    (64, 8, False, False),
    (37, 4, False, True),
    (5, 4, False, False),
    (48, 12, True, True),
    (50, 6, True, False),
    (1, 3, False, False),
]


def gather_every_case(cases):
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator

    outcomes = []
    for size, batch_size, split_batches, shuffle in cases:
        accelerator = Accelerator(split_batches=split_batches)
        loader = accelerator.prepare(DataLoader(torch.arange(size), batch_size=batch_size, shuffle=shuffle))
        for epoch in range(2):
            seen, local_batches = [], 0
            for batch in loader:
                local_batches += 1
                seen.extend(accelerator.gather_for_metrics(batch).tolist())
            counts = accelerator.gather(torch.tensor([local_batches])).tolist()
            objects = []
            for batch in loader:
                objects.extend(accelerator.gather_for_metrics([f"item-{i}" for i in batch.tolist()]))
            outcomes.append(
                {"case": (size, batch_size, split_batches, shuffle, epoch), "seen": seen, "counts": counts,
                 "len": len(loader), "objects": objects}
            )  # fmt: skip
    return outcomes


@pytest.mark.parametrize("num_processes", [2, 3])
def test_each_item_exactly_once_launch(num_processes):
    per_rank = run_on_ranks(gather_every_case, num_processes, CASES)
    for outcomes in zip(*per_rank, strict=True):
        first = outcomes[0]
        size = first["case"][0]
        for outcome in outcomes:
            assert sorted(outcome["seen"]) == list(range(size)), outcome["case"]
            assert sorted(outcome["objects"]) == sorted(f"item-{i}" for i in range(size)), outcome["case"]
            # even_batches: every rank ran the same number of batches, and len() said so.
            assert outcome["counts"] == [outcome["len"]] * num_processes, outcome["case"]
            assert outcome["seen"] == first["seen"]


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
