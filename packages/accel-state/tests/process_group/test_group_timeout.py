"""Groups made during the job (new_group, DeviceMesh dimensions) wait the job's timeout, not
torch's 30-minute default; an explicit timeout still wins; torch's default is back after the job."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_JOB = textwrap.dedent(
    """
    import datetime, json
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from accel_state.process_group.group import destroy_process_group, init_single_process_group
    import torch.distributed.distributed_c10d as c10d

    def waits(group):
        return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()

    before = c10d._get_default_timeout("gloo").total_seconds()
    init_single_process_group("gloo", datetime.timedelta(seconds=7))
    found = {
        "world": waits(dist.group.WORLD),
        "new_group": waits(dist.new_group([0])),
        "mesh": waits(init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp")).get_group("tp")),
        "explicit": waits(dist.new_group([0], timeout=datetime.timedelta(seconds=99))),
        "before": before,
    }
    destroy_process_group()
    found["after"] = c10d._get_default_timeout("gloo").total_seconds()
    print("FOUND " + json.dumps(found))
    """
)


def test_groups_made_during_the_job_wait_the_jobs_timeout(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(_JOB)
    result = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("FOUND ")]
    found = json.loads(line.removeprefix("FOUND "))
    assert found == {
        "world": 7.0,
        "new_group": 7.0,
        "mesh": 7.0,
        "explicit": 99.0,
        "before": 1800.0,
        "after": 1800.0,
    }
