"""set_trigger/check_trigger, trigger_sync_in_backward and destroy_process_group on 2 real ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def stop_when_rank_1_says_so():
    import torch.distributed as dist

    from accel import Accelerator

    accelerator = Accelerator()
    seen = []
    for step in range(6):
        if accelerator.process_index == 1 and step == 2:
            accelerator.set_trigger()
        seen.append(accelerator.check_trigger())
    accelerator.end_training()
    accelerator.state.destroy_process_group()
    return seen, dist.is_initialized()


def test_a_trigger_set_on_one_rank_fires_on_every_rank_once_launch():
    first, second = run_on_ranks(stop_when_rank_1_says_so, 2, timeout=120)
    expected = [False, False, True, False, False, False]
    assert first[0] == expected and second[0] == expected
    assert first[1] is False and second[1] is False  # destroy_process_group left the group


def gradients_inside_no_sync(force_sync):
    import torch

    from accel import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(2, 1, bias=False))
    x = torch.full((1, 2), float(accelerator.process_index + 1))  # different data on each rank
    with accelerator.no_sync(model):
        loss = model(x).sum()
        flags_before = (model.require_backward_grad_sync, model.require_forward_param_sync)
        if force_sync:
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(loss)
        else:
            accelerator.backward(loss)
        flags_after = (model.require_backward_grad_sync, model.require_forward_param_sync)
    grad = model.module.weight.grad.flatten().tolist()
    return {"grad": grad, "flags_before": flags_before, "flags_after": flags_after}


def test_trigger_sync_in_backward_all_reduces_inside_no_sync_launch():
    local = run_on_ranks(gradients_inside_no_sync, 2, False, timeout=120)
    assert [r["grad"] for r in local] == [[1.0, 1.0], [2.0, 2.0]]  # no_sync: each rank's own
    synced = run_on_ranks(gradients_inside_no_sync, 2, True, timeout=120)
    assert [r["grad"] for r in synced] == [[1.5, 1.5], [1.5, 1.5]]  # averaged across ranks
    # Still inside no_sync after the block: DDP's flags are what no_sync had set.
    assert all(r["flags_after"] == r["flags_before"] for r in synced)
    assert synced[0]["flags_before"] == (False, False)
