"""Every test starts and ends with fresh shared state and no launcher variables in the environment."""

import pytest

from accel_state.testing import single_process_environment


@pytest.fixture(autouse=True)
def fresh_state():
    with single_process_environment():
        yield
