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


# What Accelerate 1.15's accelerate/test_utils/testing.py and test_utils/scripts/*.py import from
# accelerate.utils (the probes and helpers), so that those files import under accel.utils too.
ACCELERATE_TEST_IMPORTS = (
    "check_cuda_fp8_capability compare_versions gather is_aim_available is_bf16_available "
    "is_bnb_available is_ccl_available is_clearml_available is_comet_ml_available is_cuda_available "
    "is_datasets_available is_deepspeed_available is_dvclive_available is_fp16_available "
    "is_fp8_available is_habana_gaudi1 is_hpu_available is_import_timer_available is_ipex_available "
    "is_lomo_available is_matplotlib_available is_megatron_lm_available is_mlflow_available "
    "is_mlu_available is_mpi_available is_mps_available is_msamp_available is_musa_available "
    "is_npu_available is_pandas_available is_peft_available is_pippy_available is_pynvml_available "
    "is_pytest_available is_rich_available is_rocm_available is_sagemaker_available "
    "is_schedulefree_available is_sdaa_available is_swanlab_available is_tensorboard_available "
    "is_timm_available is_torch_version is_torch_xla_available is_torchao_available "
    "is_torchdata_stateful_dataloader_available is_torchvision_available is_trackio_available "
    "is_transformer_engine_available is_transformers_available is_triton_available is_wandb_available "
    "is_weights_only_available is_xccl_available is_xpu_available str_to_bool"
).split()


def test_every_name_accelerates_test_files_import_from_utils_is_there():
    import accel.utils as utils

    missing = [name for name in ACCELERATE_TEST_IMPORTS if not hasattr(utils, name)]
    assert missing == []
    assert set(ACCELERATE_TEST_IMPORTS) <= set(utils.__all__)


def test_str_to_bool_answers_as_accelerates_and_names_a_bad_value():
    import pytest

    from accel.utils import str_to_bool

    assert [str_to_bool(w) for w in ("yes", "T", "on", "1")] == [1, 1, 1, 1]
    assert [str_to_bool(w) for w in ("no", "F", "off", "0")] == [0, 0, 0, 0]
    assert str_to_bool("true", to_bool=True) is True and str_to_bool("n", to_bool=True) is False
    with pytest.raises(ValueError, match="'maybe' is neither a yes-word"):
        str_to_bool("maybe")
