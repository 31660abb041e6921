"""The pytest plugin of accel's own suites: every test runs as a plain one-process run.

It has no `pytest11` entry point, so installing accel-state changes nobody else's tests: our
suites load it with `-p accel_state.testing.pytest_plugin` (the repository's pytest.ini). A
folder whose tests must keep the environment (jobs they launch inherit it) overrides the
fixture by name in its conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accel_state.testing import single_process_environment


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """Start and end every test with fresh shared state and no launcher variables in the environment."""
    with single_process_environment():
        yield
