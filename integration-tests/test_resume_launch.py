"""Resuming mid-epoch on 2 real ranks: the batches before the stop and after the resume are the epoch.

One launch runs every case. On each rank a loader is stopped part-way through an epoch; a fresh
loader then resumes, once by `skip_first_batches` and once by `load_state_dict` of the stopped
loader's state, and `gather_for_metrics` over the stopped and resumed parts sees each sample once.
"""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

CASES = [
    # dataset size, batch size, split_batches, even_batches, drop_last, shuffle, batches before stop, epoch
    (37, 4, False, True, False, True, 3, 1),
    (37, 4, False, False, False, True, 2, 0),
    (40, 4, True, True, False, True, 4, 1),
    (41, 6, True, False, True, False, 1, 0),
    (64, 8, False, True, True, True, 0, 2),
    (23, 3, False, True, False, True, 4, 1),  # stopped after the last batch
    (9, 2, True, True, False, True, 2, 0),
]


def _prepared(size, batch_size, split_batches, even_batches, drop_last, shuffle):
    import torch
    from torch.utils.data import DataLoader

    from accel_data import prepare_data_loader

    loader = DataLoader(torch.arange(size), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
    # Fresh loaders of one process must shuffle an epoch alike: an order that is a function of
    # (seed, epoch). torch's default shuffle resumes through the checkpoint's random states instead
    # (test_checkpoint_resume_launch.py).
    return prepare_data_loader(
        loader, split_batches=split_batches, even_batches=even_batches, use_seedable_sampler=True
    )


def _items(batches):
    return [batch.tolist() for batch in batches]


def resume_every_case(cases):
    from accel import Accelerator
    from accel_data import skip_first_batches

    accelerator = Accelerator()
    outcomes = []
    for case in cases:
        *loader_args, stop, epoch = case
        even_batches = case[3]
        reference = _prepared(*loader_args)
        reference.set_epoch(epoch)
        full, next_epoch = _items(reference), _items(reference)

        stopped = _prepared(*loader_args)
        stopped.set_epoch(epoch)
        batches, head, gathered = iter(stopped), [], []
        for _ in range(stop):
            batch = next(batches)
            head.append(batch.tolist())
            if even_batches:
                gathered.extend(accelerator.gather_for_metrics(batch).tolist())
        state = stopped.state_dict()
        batches.close()

        manual = _prepared(*loader_args)
        manual.set_epoch(epoch)
        rest_manual = []
        for batch in skip_first_batches(manual, stop):
            rest_manual.append(batch.tolist())
            if even_batches:
                gathered.extend(accelerator.gather_for_metrics(batch).tolist())
        after_manual = manual.epoch, _items(manual)

        automatic = _prepared(*loader_args)
        automatic.load_state_dict(state)
        rest_automatic = _items(automatic)
        outcomes.append(
            {"case": case,
             "full": full, "next_epoch": next_epoch, "head": head, "state": state, "rest_manual": rest_manual,
             "rest_automatic": rest_automatic, "after_manual": after_manual, "gathered": gathered}
        )  # fmt: skip
    return outcomes


def test_resume_mid_epoch_gives_the_rest_of_the_epoch_launch():
    per_rank = run_on_ranks(resume_every_case, 2, CASES)
    for outcomes in zip(*per_rank, strict=True):
        case = outcomes[0]["case"]
        size, _, _, even_batches, drop_last, _, stop, epoch = case
        assert outcomes[0]["full"] != outcomes[1]["full"], case  # each rank has its own shard
        for rank, outcome in enumerate(outcomes):
            where = (case, rank)
            full = outcome["full"]
            assert outcome["head"] == full[:stop], where
            assert outcome["head"] + outcome["rest_manual"] == full, where
            assert outcome["after_manual"] == (epoch + 1, outcome["next_epoch"]), where
            if stop < len(full):
                assert outcome["state"]["batches_yielded"] == stop, where
                assert outcome["state"]["epoch"] == epoch, where
                assert outcome["head"] + outcome["rest_automatic"] == full, where
            else:
                # Stopped after the last batch: the resume starts the next epoch whole.
                assert outcome["state"]["epoch"] == epoch + 1, where
                assert outcome["rest_automatic"] == outcome["next_epoch"], where
            if even_batches and not drop_last:
                assert sorted(outcome["gathered"]) == list(range(size)), where
