"""use_stateful_dataloader=True: torchdata's loader, through save_state and load_state."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration


def test_without_torchdata_the_configuration_says_so_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchdata.stateful_dataloader", None)
    with pytest.raises(ImportError, match="pip install torchdata") as caught:
        DataLoaderConfiguration(use_stateful_dataloader=True)
    assert "\n" not in str(caught.value)
    assert not DataLoaderConfiguration().use_stateful_dataloader  # Accelerate's default


def _prepared(use_seedable_sampler=True):
    pytest.importorskip("torchdata.stateful_dataloader")
    from accel import AcceleratorState

    AcceleratorState._reset_state()
    config = DataLoaderConfiguration(
        use_stateful_dataloader=True, data_seed=4, use_seedable_sampler=use_seedable_sampler
    )
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    loader = DataLoader(TensorDataset(torch.arange(24)), batch_size=4, shuffle=True)
    return accelerator, accelerator.prepare(loader)


@pytest.mark.parametrize("use_seedable_sampler", [True, False])
def test_save_state_and_load_state_resume_the_loader_mid_epoch(tmp_path, use_seedable_sampler):
    from torchdata.stateful_dataloader import StatefulDataLoader

    accelerator, loader = _prepared(use_seedable_sampler)
    assert isinstance(loader, StatefulDataLoader)
    list(loader)
    batches = iter(loader)  # epoch 1, shuffled anew either way
    seen = [next(batches)[0].tolist() for _ in range(2)]
    accelerator.save_state(tmp_path / "checkpoint")
    whole = seen + [batch[0].tolist() for batch in batches]

    accelerator, resumed = _prepared(use_seedable_sampler)
    accelerator.load_state(tmp_path / "checkpoint")  # resumes by itself, as Accelerate's does
    rest = [batch[0].tolist() for batch in resumed]
    assert seen + rest == whole
    assert len(rest) == 4
