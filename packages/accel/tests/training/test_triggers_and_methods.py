"""Accelerator methods scripts call around the training step, used as Accelerate's docs use them."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator, AcceleratorState, GeneralTracker, PartialState


def test_check_trigger_fires_once_after_set_trigger():
    accelerator = Accelerator()
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False  # the flag was lowered by the check


def test_early_stopping_loop_as_documented():
    accelerator = Accelerator()
    stopped_at = None
    for step in range(10):
        if step == 3:  # "the loss went above the threshold"
            accelerator.set_trigger()
        if accelerator.check_trigger():
            stopped_at = step
            break
    assert stopped_at == 3


def test_trigger_sync_in_backward_on_one_process_runs_the_block():
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    with accelerator.no_sync(model):
        loss = model(torch.ones(1, 2)).sum()
        accelerator.backward(loss)
    with accelerator.trigger_sync_in_backward(model):
        accelerator.backward(model(torch.ones(1, 2)).sum())
    assert torch.equal(model.weight.grad, torch.full((1, 2), 2.0))


def test_verify_device_map_is_true_only_for_a_map_over_several_devices():
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    assert accelerator.verify_device_map(model) is False
    model.hf_device_map = {"0": 0, "1": 0}
    assert accelerator.verify_device_map(model) is False
    model[1].hf_device_map = {"": "cpu", "x": 0}  # a submodule's map counts too
    assert accelerator.verify_device_map(model) is True
    model = torch.nn.Linear(1, 1)
    model.hf_device_map = {"a": "cuda:0", "b": "disk"}
    assert accelerator.verify_device_map(model) is True


def test_destroy_process_group_without_a_group_is_a_no_op():
    PartialState().destroy_process_group()
    AcceleratorState().destroy_process_group()
    AcceleratorState().destroy_process_group(group=None)


def test_on_local_process_runs_only_on_that_local_index():
    accelerator = Accelerator()

    @accelerator.on_local_process(local_process_index=0)
    def here():
        return "ran"

    @accelerator.on_local_process(local_process_index=1)
    def elsewhere():
        return "ran"

    assert (here(), elsewhere()) == ("ran", None)
    assert PartialState().on_local_process(lambda: 1, local_process_index=0)() == 1


def test_free_memory_forgets_prepared_objects_and_returns_nones():
    accelerator = Accelerator()
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.step = 5
    model, optimizer = accelerator.free_memory(model, optimizer)
    assert (model, optimizer) == (None, None)
    assert accelerator._models == [] and accelerator._optimizers == [] and accelerator.step == 0
    assert accelerator.clear() == []


class _Recorder(GeneralTracker):
    name = "recorder"
    requires_logging_directory = False

    def __init__(self):
        super().__init__()
        self.finished = 0

    @property
    def tracker(self):
        return self

    def finish(self):
        self.finished += 1


def test_end_training_finishes_the_trackers():
    recorder = _Recorder()
    accelerator = Accelerator(log_with=recorder)
    accelerator.init_trackers("run")
    accelerator.end_training()
    assert recorder.finished == 1


@pytest.mark.parametrize("method", ["set_trigger", "check_trigger", "trigger_sync_in_backward"])
def test_the_methods_are_documented(method):
    assert getattr(Accelerator, method).__doc__
