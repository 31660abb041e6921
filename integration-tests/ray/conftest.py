"""A local Ray cluster for the tests of this folder: started once, bound to the loopback, small.

Ray is installed only by the nox session `ray`; elsewhere every test here is skipped. Ray is
imported inside the fixtures, so that collecting this folder without it costs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
SKIP_REASON = "Ray runs in the nox session ray (`nox -s ray`), which installs ray[train]"

# Read by Ray when it is imported (before the test modules import it: set here, at collection) and
# by the processes it starts. Without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 Ray replaces 127.0.0.1 by
# the machine's address, and Ray Train hands that to torch as MASTER_ADDR. Ray's sessions (logs,
# sockets) go to a folder of this run, removed at its end, instead of piling up in /tmp/ray.
_RAY_TMPDIR = tempfile.mkdtemp(prefix="accel-raytmp-")
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_TMPDIR": _RAY_TMPDIR,
}
os.environ.update(RAY_ENV)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[ModuleType]:
    """Start a local Ray cluster of 2 CPUs on 127.0.0.1 (no dashboard, a 200 MB object store) and
    return the `ray` module; it is shut down after the module's last test, so that only one cluster
    runs at a time (the example starts its own)."""
    ray = pytest.importorskip("ray", reason=SKIP_REASON)
    pytest.importorskip("ray.train.torch", reason=SKIP_REASON)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def training_job(ray_cluster: ModuleType) -> ModuleType:
    """Return training_job.py as a module whose functions Ray ships by value (its workers could not
    import this folder, which is no package)."""
    spec = importlib.util.spec_from_file_location("accel_ray_training_job", HERE / "training_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray_cluster.cloudpickle.register_pickle_by_value(module)
    return module
