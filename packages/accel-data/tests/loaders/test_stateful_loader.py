"""`use_stateful_dataloader=True`: prepared loaders on torchdata's StatefulDataLoader."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from accel_data import prepare_data_loader
from accel_data.loaders.stateful import STATE_KEY, stateful_dataloader_class


class _Counting(Dataset):
    """Counts its reads; the count is its state (torchdata saves a dataset that has one)."""

    def __init__(self, length=20):
        self.length = length
        self.reads = 0

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        self.reads += 1
        return torch.tensor(index)

    def state_dict(self):
        return {"reads": self.reads}

    def load_state_dict(self, state):
        self.reads = state["reads"]


def _prepared(dataset, **kwargs):
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    return prepare_data_loader(
        loader, use_stateful_dataloader=True, use_seedable_sampler=True, data_seed=3, **kwargs
    )


def test_without_torchdata_the_error_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchdata.stateful_dataloader", None)
    with pytest.raises(
        ImportError, match="needs torchdata's StatefulDataLoader.*pip install torchdata"
    ) as caught:
        stateful_dataloader_class()
    assert "\n" not in str(caught.value)


def test_a_mid_epoch_state_resumes_through_torchdata():
    pytest.importorskip("torchdata.stateful_dataloader")
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = _prepared(_Counting(), num_processes=2, process_index=1)
    assert isinstance(loader, StatefulDataLoader)
    list(loader)  # epoch 0; the pass below is epoch 1
    seen, batches = [], iter(loader)
    for _ in range(2):
        seen.append(next(batches).tolist())
    state = json.loads(json.dumps(loader.state_dict()))  # JSON data, as save_state writes it
    assert (state["epoch"], state["batches_yielded"]) == (1, 2) and STATE_KEY in state
    reads_at_save = loader.dataset.reads  # one batch more than seen: the loader reads ahead
    del batches

    dataset = _Counting()
    resumed = _prepared(dataset, num_processes=2, process_index=1)
    resumed.load_state_dict(state)
    rest = [batch.tolist() for batch in resumed]
    fresh = _prepared(_Counting(), num_processes=2, process_index=1)
    fresh.set_epoch(1)
    assert seen + rest == [batch.tolist() for batch in fresh]
    # torchdata restored the dataset's own state as of the last batch seen, then read only the rest.
    assert reads_at_save == 10 + 6  # epoch 0, then 3 batches of 2
    assert dataset.reads == reads_at_save - 2 + 2 * len(rest)
    assert resumed.state_dict() == {"epoch": 2, "batches_yielded": 0, "global_batch_size": 4}


def test_a_position_from_skip_first_batches_or_another_epoch_is_not_torchdatas():
    pytest.importorskip("torchdata.stateful_dataloader")
    from accel_data import skip_first_batches

    loader = _prepared(_Counting())
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    del batches
    resumed = _prepared(_Counting())
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # cancels the resume, and torchdata's loaded state with it
    assert len([batch for batch in resumed]) == 10
    again = _prepared(_Counting())
    again.load_state_dict(state)
    assert len(list(skip_first_batches(again, 3))) == 7  # the explicit skip wins
    assert len(list(again)) == 10
