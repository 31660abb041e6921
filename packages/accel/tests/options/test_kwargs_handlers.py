"""Kwargs handlers and the accumulation plugin on one CPU process: what each hands on, and where."""

from __future__ import annotations

import datetime
import json

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import (
    Accelerator,
    AutocastKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    PartialState,
    ProfileKwargs,
)
from accel.options.handlers import KwargsHandlers
from accel.testing import train_steps


def test_to_kwargs_returns_only_the_fields_changed_from_defaults():
    assert DistributedDataParallelKwargs().to_kwargs() == {}
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True, bucket_cap_mb=10, comm_hook="fp16")
    assert ddp.to_kwargs() == {"find_unused_parameters": True, "bucket_cap_mb": 10}
    assert ddp.comm_hook is DDPCommunicationHookType.FP16
    assert GradScalerKwargs(init_scale=1024.0).to_kwargs() == {"init_scale": 1024.0}
    assert AutocastKwargs(enabled=False).to_kwargs() == {"enabled": False}
    assert InitProcessGroupKwargs(backend="nccl").to_kwargs() == {}
    timeout = datetime.timedelta(seconds=42)
    assert InitProcessGroupKwargs(timeout=timeout).to_kwargs() == {"timeout": timeout}
    assert GradientAccumulationPlugin(num_steps=2).to_kwargs() == {"num_steps": 2}
    assert isinstance(ProfileKwargs(), KwargsHandler)


def test_comm_hook_and_wrapper_are_checked_where_they_are_written():
    options = DistributedDataParallelKwargs(
        comm_hook=DDPCommunicationHookType.POWER_SGD,
        comm_wrapper=DDPCommunicationHookType.FP16,
        comm_state_option={"matrix_approximation_rank": 2},
    ).comm_hook_options()
    assert options.hook is DDPCommunicationHookType.POWER_SGD
    assert options.wrapper is DDPCommunicationHookType.FP16
    assert options.state_option == {"matrix_approximation_rank": 2}
    with pytest.raises(ValueError, match="comm_hook 'fp8'"):
        DistributedDataParallelKwargs(comm_hook="fp8")
    with pytest.raises(ValueError, match="comm_wrapper 'power_sgd' is not a wrapper"):
        DistributedDataParallelKwargs(comm_wrapper="power_sgd")


def test_a_handler_type_given_twice_is_an_error_naming_it():
    with pytest.raises(ValueError, match="one GradScalerKwargs in `kwargs_handlers`"):
        Accelerator(kwargs_handlers=[GradScalerKwargs(), AutocastKwargs(), GradScalerKwargs(init_scale=2.0)])
    with pytest.raises(TypeError, match="unsupported handler"):
        KwargsHandlers.from_list([{"init_scale": 2.0}])  # type: ignore[list-item]


def test_handlers_are_kept_under_accelerates_attribute_names():
    ddp, profile = DistributedDataParallelKwargs(static_graph=True), ProfileKwargs()
    accelerator = Accelerator(kwargs_handlers=[ddp, profile])
    assert accelerator.ddp_handler is ddp and accelerator.profile_handler is profile
    assert accelerator.scaler_handler is None and accelerator.init_handler is None
    assert accelerator.autocast_handler is None
    assert accelerator.backend.ddp_kwargs == {"static_graph": True}


def test_ddp_arguments_given_twice_are_refused():
    with pytest.raises(ValueError, match="DDP arguments are given twice"):
        Accelerator(ddp_kwargs={"static_graph": True}, kwargs_handlers=[DistributedDataParallelKwargs()])


def test_grad_scaler_kwargs_reach_the_fp16_scaler():
    accelerator = Accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0, growth_interval=7)]
    )
    assert accelerator.scaler.get_scale() == 1024.0
    assert accelerator.scaler.get_growth_interval() == 7


def test_grad_scaler_kwargs_are_ignored_outside_fp16():
    accelerator = Accelerator(mixed_precision="bf16", kwargs_handlers=[GradScalerKwargs(init_scale=2.0)])
    assert accelerator.scaler is None


def _forward_dtypes(accelerator):
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    seen = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    model(torch.randn(2, 4))
    return seen


def test_autocast_kwargs_disabled_keep_the_forward_and_autocast_in_fp32_under_bf16():
    accelerator = Accelerator(mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(enabled=False)])
    assert _forward_dtypes(accelerator) == [torch.float32]
    with accelerator.autocast():
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32


def test_without_autocast_kwargs_bf16_forward_runs_in_bf16_and_a_handler_can_disable_a_block():
    accelerator = Accelerator(mixed_precision="bf16")
    assert _forward_dtypes(accelerator) == [torch.bfloat16]
    with accelerator.autocast(AutocastKwargs(enabled=False)):
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32
    with accelerator.autocast(AutocastKwargs(cache_enabled=False)):
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.bfloat16
        assert torch.is_autocast_cache_enabled() is False


def test_autocast_kwargs_cache_enabled_reaches_torch_autocast():
    accelerator = Accelerator(mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(cache_enabled=False)])
    with accelerator.autocast():
        assert torch.is_autocast_cache_enabled() is False
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    seen = []
    model[0].register_forward_hook(lambda *_: seen.append(torch.is_autocast_cache_enabled()))
    model(torch.randn(1, 2))
    assert seen == [False]


def test_init_process_group_kwargs_timeout_reaches_partial_state():
    Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=90))])
    assert PartialState().timeout == datetime.timedelta(seconds=90)


def test_init_process_group_timeout_given_twice_is_refused():
    with pytest.raises(ValueError, match="timeout is given twice"):
        Accelerator(
            timeout=5, kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=9))]
        )


def test_process_group_backend_reaches_the_backends_choice():
    from accel_state.environment.device import choose_process_group_backend

    cpu = torch.device("cpu")
    assert choose_process_group_backend(cpu) == "gloo"
    assert choose_process_group_backend(cpu, "GLOO") == "gloo"
    with pytest.raises(ValueError, match="'nccl' needs a CUDA device"):
        choose_process_group_backend(cpu, "nccl")
    assert KwargsHandlers.from_list([InitProcessGroupKwargs(backend="gloo")]).state_kwargs(None) == {
        "timeout": None,
        "backend": "gloo",
        "init_method": None,
    }


def _loader(n=12, batch_size=2):
    return DataLoader(TensorDataset(torch.randn(n, 1), torch.randn(n, 1)), batch_size=batch_size)


def _syncs(accelerator, batches=12):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader(batches * 2))
    return [step.sync_gradients for step in train_steps(accelerator, model, optimizer, loader)]


def test_gradient_accumulation_plugin_sets_the_steps():
    accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4))
    assert accelerator.gradient_accumulation_steps == 4
    assert _syncs(accelerator, 6) == [False, False, False, True, False, True]


def test_plugin_and_steps_together_are_refused():
    with pytest.raises(ValueError, match="only pass one of `gradient_accumulation_steps`"):
        Accelerator(gradient_accumulation_steps=2, gradient_accumulation_plugin=GradientAccumulationPlugin(2))


def test_sync_with_dataloader_false_lets_the_last_batch_accumulate():
    plugin = GradientAccumulationPlugin(num_steps=4, sync_with_dataloader=False)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_state.sync_with_dataloader is False
    assert _syncs(accelerator, 6) == [False, False, False, True, False, False]


def test_sync_each_batch_flag_reaches_the_gradient_state():
    plugin = GradientAccumulationPlugin(num_steps=2, sync_each_batch=True)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_state.sync_each_batch is True
    assert accelerator.gradient_state.plugin_kwargs == {"num_steps": 2, "sync_each_batch": True}
    # One process: nothing to all-reduce, so the steps are those of plain accumulation.
    assert _syncs(accelerator, 4) == [False, True, False, True]


def test_a_later_accelerator_without_plugin_gets_the_defaults_back():
    Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(2, sync_with_dataloader=False))
    accelerator = Accelerator()
    assert accelerator.gradient_accumulation_steps == 1
    assert accelerator.gradient_state.sync_with_dataloader is True


def test_adjust_scheduler_counts_accumulation_steps_on_the_scheduler():
    # Three batches, two per step: one real step, two accumulation steps.
    for adjust, expected in ((True, 3), (False, 1)):
        plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=adjust)
        accelerator = Accelerator(gradient_accumulation_plugin=plugin)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        start = scheduler.scheduler._step_count
        batches = [(torch.randn(2, 1), torch.randn(2, 1)) for _ in range(3)]
        train_steps(accelerator, model, optimizer, batches, scheduler=scheduler)
        assert scheduler.scheduler._step_count - start == expected


def test_profile_writes_a_chrome_trace_per_rank(tmp_path):
    accelerator = Accelerator(
        kwargs_handlers=[ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path))]
    )
    with accelerator.profile() as profiler:
        torch.randn(16, 16) @ torch.randn(16, 16)
    assert isinstance(profiler, torch.profiler.profile)
    trace = tmp_path / "profile_0.json"
    assert trace.is_file()
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(
        "matmul" in str(event.get("name", "")) or "mm" in str(event.get("name", "")) for event in events
    )


def test_profile_without_a_trace_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    accelerator = Accelerator()
    with accelerator.profile(ProfileKwargs(record_shapes=True)) as profiler:
        torch.ones(2) + 1
    assert profiler.key_averages() is not None
    assert list(tmp_path.iterdir()) == []


def test_profile_rejects_an_unknown_activity():
    with pytest.raises(ValueError, match="unknown activity 'tpu'"):
        ProfileKwargs(activities=["tpu"]).build()
