"""DistributedDataParallelKwargs on 2 gloo ranks: the comm hook is registered and the DDP arguments
reach DistributedDataParallel, while gradients stay equal across ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def _half_used():
    import torch

    class HalfUsed(torch.nn.Module):
        """`unused` never takes part in the forward: DDP accepts that only with find_unused_parameters."""

        def __init__(self):
            super().__init__()
            self.used = torch.nn.Linear(8, 4)
            self.unused = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.used(x)

    return HalfUsed()


def train_with_handler(comm_hook, comm_wrapper, comm_state_option):
    import torch

    from accel import Accelerator, DistributedDataParallelKwargs

    handler = DistributedDataParallelKwargs(
        find_unused_parameters=True,
        comm_hook=comm_hook,
        comm_wrapper=comm_wrapper,
        comm_state_option=comm_state_option,
    )
    accelerator = Accelerator(kwargs_handlers=[handler])
    torch.manual_seed(0)
    model = accelerator.prepare(_half_used())
    hooks = [hook.__name__ for hook, _ in model._comm_hooks]
    try:
        model.register_comm_hook(None, lambda state, bucket: None)
        second_hook_refused = False
    except RuntimeError:
        second_hook_refused = True
    grads = []
    for step in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * step + accelerator.process_index))
        model.zero_grad()
        accelerator.backward(model(x).pow(2).mean())
        grad = model.module.used.weight.grad.detach().clone()
        grads.append(accelerator.gather(grad.unsqueeze(0)).tolist())
    return {
        "hooks": hooks,
        "second_hook_refused": second_hook_refused,
        "find_unused_parameters": model.find_unused_parameters,
        "grads": grads,
        "unused_grad": model.module.unused.weight.grad is None,
    }


@pytest.mark.parametrize(
    "comm_hook, comm_wrapper, comm_state_option, hook_name",
    [
        ("fp16", "no", {}, "fp16_compress_hook"),
        ("power_sgd", "fp16", {"matrix_approximation_rank": 1}, "fp16_compress_wrapper_hook"),
    ],
)
def test_comm_hook_is_registered_and_ddp_arguments_reach_ddp_launch(
    comm_hook, comm_wrapper, comm_state_option, hook_name
):
    import torch

    for result in run_on_ranks(train_with_handler, 2, comm_hook, comm_wrapper, comm_state_option):
        assert result["hooks"] == [hook_name]
        assert result["second_hook_refused"]
        assert result["find_unused_parameters"] is True
        assert result["unused_grad"]
        for both_ranks in result["grads"]:
            first, second = torch.tensor(both_ranks)
            # fp16 compression rounds the same way on both ranks: the averaged gradients agree.
            assert torch.equal(first, second)
            assert first.abs().sum() > 0


def count_all_reduces_syncing_each_batch(sync_each_batch):
    import torch

    from accel import Accelerator, GradientAccumulationPlugin
    from accel.testing import all_reduces_per_step

    plugin = GradientAccumulationPlugin(num_steps=3, sync_each_batch=sync_each_batch)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return all_reduces_per_step(accelerator, model, optimizer, [torch.randn(4, 4) for _ in range(6)])


@pytest.mark.parametrize("sync_each_batch", [False, True])
def test_sync_each_batch_all_reduces_every_batch_but_steps_every_num_steps_launch(sync_each_batch):
    for per_step in run_on_ranks(count_all_reduces_syncing_each_batch, 2, sync_each_batch):
        assert [sync for sync, _ in per_step] == [False, False, True] * 2
        for sync, all_reduces in per_step:
            assert (all_reduces > 0) == (sync or sync_each_batch)
