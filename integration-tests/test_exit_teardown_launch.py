"""No gloo thread outlives accel's exit teardown, whatever the script still holds.

gloo threads still running when the interpreter finalizes can abort a rank with SIGABRT
("terminate called without an active exception") after all of its work: a rare failure of any
launched job. The job (jobs/threads_at_exit.py) lists its threads from an exit handler that runs
after accel's teardown.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launch_args", [(), ("--use_fsdp",)], ids=["ddp", "fsdp"])
@pytest.mark.parametrize("held", ["global", "local"])
def test_no_gloo_thread_outlives_the_teardown_launch(check_no_gloo_thread_left, launch_args, held):
    check_no_gloo_thread_left(held, launch_args)
