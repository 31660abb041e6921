"""load_state compares every key, shape and dtype of a checkpoint with the live model and optimizer
before it changes either: a checkpoint that does not fit is one error naming the file, the key and
both shapes (or dtypes), and the live objects stay exactly as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel import Accelerator
from accel.checkpointing import load_state, save_state
from accel.checkpointing.content_digest import content_digest
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.format import METADATA_NAME


def _prepared(model, optimizer_params=None, step=False):
    accelerator = Accelerator()
    params = list(model.parameters()) if optimizer_params is None else optimizer_params(model)
    optimizer = torch.optim.AdamW(params, lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    if step:  # the optimizer then holds state (exp_avg, exp_avg_sq) of each parameter
        width = next(model.parameters()).shape[-1]
        accelerator.backward(model(torch.randn(3, width)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    return accelerator, model, optimizer


def _snapshot(model, optimizer):
    return content_digest([model.state_dict(), optimizer.state_dict()])


def _saved(tmp_path, model, **options) -> Path:
    accelerator, *_ = _prepared(model, **options)
    return Path(save_state(accelerator, tmp_path / "c"))


def test_a_linear_4_2_checkpoint_into_a_linear_8_2_changes_nothing(tmp_path):
    folder = _saved(tmp_path, torch.nn.Linear(4, 2))
    accelerator, model, optimizer = _prepared(torch.nn.Linear(8, 2))
    weight, bias = model.weight.detach().clone(), model.bias.detach().clone()
    with pytest.raises(CheckpointError) as caught:
        load_state(accelerator, folder)
    assert str(caught.value) == (
        f"{folder / 'model.safetensors'} does not fit model 0: 'weight' has shape (2, 4) in the checkpoint "
        "and (2, 8) in the model (load it into a model of the same architecture)"
    )
    assert torch.equal(model.weight, weight) and torch.equal(model.bias, bias)


def test_missing_and_unexpected_keys_change_nothing(tmp_path):
    folder = _saved(tmp_path, torch.nn.Sequential(torch.nn.Linear(4, 4)))
    accelerator, model, optimizer = _prepared(
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    )
    before = _snapshot(model, optimizer)
    with pytest.raises(
        CheckpointError,
        match=r"model\.safetensors does not fit model 0: model 0 has '1\.weight', '1\.bias', which the "
        r"checkpoint lacks",
    ):
        load_state(accelerator, folder)
    assert _snapshot(model, optimizer) == before


def test_another_dtype_changes_nothing(tmp_path):
    folder = _saved(tmp_path, torch.nn.Linear(4, 2))
    accelerator, model, optimizer = _prepared(torch.nn.Linear(4, 2).double())
    before = _snapshot(model, optimizer)
    with pytest.raises(
        CheckpointError,
        match=r"does not fit model 0: 'weight' is torch\.float32 in the checkpoint and torch\.float64",
    ):
        load_state(accelerator, folder)
    assert _snapshot(model, optimizer) == before


def _reversed(model):
    return list(model.parameters())[::-1]  # bias (2,), then weight (2, 4)


def test_an_optimizer_over_other_parameters_changes_nothing(tmp_path):
    """The model file fits; the optimizer's parameters (same count) do not: torch would load it."""
    folder = _saved(tmp_path, torch.nn.Linear(4, 2), step=True)
    accelerator, model, optimizer = _prepared(torch.nn.Linear(4, 2), optimizer_params=_reversed)
    before = _snapshot(model, optimizer)
    with pytest.raises(CheckpointError) as caught:
        load_state(accelerator, folder)
    assert str(caught.value) == (
        f"{folder / 'optimizer.bin'} does not fit the optimizer: parameter 0 ('bias') had shape (2, 4) "
        "when saved and has (2,) now (load it into the optimizer of the same model)"
    )
    assert _snapshot(model, optimizer) == before


def test_an_optimizer_state_of_another_shape_is_refused_without_a_recorded_layout(tmp_path):
    """A checkpoint without parameter shapes (older accel): the optimizer's own state is compared."""
    folder = _saved(tmp_path, torch.nn.Linear(4, 2), step=True)
    meta = json.loads((folder / METADATA_NAME).read_text())
    del meta["optimizer_parameters"]
    (folder / METADATA_NAME).write_text(json.dumps(meta))
    accelerator, model, optimizer = _prepared(torch.nn.Linear(4, 2), optimizer_params=_reversed, step=True)
    before = _snapshot(model, optimizer)
    with pytest.raises(
        CheckpointError,
        match=r"optimizer\.bin does not fit the optimizer: state 'exp_avg' of parameter 0 \('bias'\) has "
        r"shape \(2, 4\) in the checkpoint and \(2,\) in the optimizer",
    ):
        load_state(accelerator, folder)
    assert _snapshot(model, optimizer) == before


def test_a_fitting_checkpoint_still_loads(tmp_path):
    accelerator, model, optimizer = _prepared(torch.nn.Linear(4, 2), step=True)
    saved = _snapshot(model, optimizer)
    folder = save_state(accelerator, tmp_path / "c")
    accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
    optimizer.step()
    assert _snapshot(model, optimizer) != saved
    load_state(accelerator, folder)
    assert _snapshot(model, optimizer) == saved
