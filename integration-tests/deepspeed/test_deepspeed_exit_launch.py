"""No gloo thread outlives accel's exit teardown in a DeepSpeed job, whatever the script still holds
(see ../test_exit_teardown_launch.py: such threads can abort a rank as the interpreter ends)."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "deepspeed", reason="DeepSpeed is not installed: they run in the nox session engines(backend='deepspeed')"
)
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stage", ["2", "3"])
@pytest.mark.parametrize("held", ["global", "local"])
def test_no_gloo_thread_outlives_the_teardown_of_a_deepspeed_job_launch(
    check_no_gloo_thread_left, stage, held
):
    launch_args = ["--use_deepspeed", "--zero_stage", stage]
    check_no_gloo_thread_left(held, launch_args, {"DS_ACCELERATOR": "cpu"})
