def test_patch_environment_sets_upper_cased_variables_and_restores_them(monkeypatch):
    import os

    from accel.utils import patch_environment

    monkeypatch.setenv("KEEP_ME", "old")
    monkeypatch.delenv("NEW_ONE", raising=False)
    with patch_environment(keep_me="new", new_one=3):
        assert os.environ["KEEP_ME"] == "new" and os.environ["NEW_ONE"] == "3"
    assert os.environ["KEEP_ME"] == "old" and "NEW_ONE" not in os.environ


def test_accelerate_names_scripts_import_from_utils():
    from accel import DistributedOperationException
    from accel.utils import DistributedOperationException as from_utils
    from accel.utils import synchronize_rng_states

    assert from_utils is DistributedOperationException
    assert callable(synchronize_rng_states)


def test_gradient_accumulation_steps_can_be_set_and_refuses_nonsense():
    import pytest

    from accel import Accelerator

    accelerator = Accelerator()
    accelerator.gradient_accumulation_steps = 4
    assert accelerator.gradient_accumulation_steps == 4 and accelerator.fp8_recipe_handler is None
    with pytest.raises(ValueError, match="must be a positive integer, got 0"):
        accelerator.gradient_accumulation_steps = 0


def test_adapter_names_load_lazily_or_say_what_to_install(monkeypatch):
    import sys

    import pytest

    import accel

    monkeypatch.setitem(sys.modules, "accel_deepspeed", None)  # as if it were not installed
    with pytest.raises(
        ImportError,
        match=r"DeepSpeedPlugin comes with accel-deepspeed.*from the repository root: "
        r"pip install -c constraints.txt \./packages/accel-state \./packages/accel-deepspeed "
        r"deepspeed==0\.19\.8$",
    ):
        accel.DeepSpeedPlugin  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        accel.NoSuchName  # noqa: B018


def test_accelerate_submodules_scripts_import_from():
    import accel.utils.dataclasses as dataclasses_module
    import accel.utils.operations as operations
    from accel.launchers import notebook_launcher
    from accel_launch import notebook_launcher as ours

    assert dataclasses_module.DistributedDataParallelKwargs.__name__ == "DistributedDataParallelKwargs"
    assert operations.reduce is __import__("accel.utils", fromlist=["reduce"]).reduce
    assert notebook_launcher is ours


def test_an_accelerator_pickles_onto_the_live_shared_state():
    import pickle

    from accel import Accelerator

    accelerator = Accelerator()
    clone = pickle.loads(pickle.dumps(accelerator))
    assert clone.state.__dict__ is accelerator.state.__dict__
    assert clone.gradient_state.__dict__ is accelerator.gradient_state.__dict__


def test_prepare_after_a_state_reset_fails_at_once_as_an_attribute_error():
    import pytest
    import torch

    from accel import Accelerator
    from accel_state import AcceleratorState

    accelerator = Accelerator()
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match=r"state was reset \(AcceleratorState._reset_state\(\)\)"):
        accelerator.prepare(torch.nn.Linear(1, 1))
