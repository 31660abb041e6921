"""`accel.logging.get_logger` on 2 real ranks: main process only by default, every rank on request,
rank by rank with `in_order=True`."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def log_on_every_rank(shared_file):
    import logging
    import time

    from accel.logging import get_logger
    from accel_state import PartialState

    state = PartialState()
    rank = state.process_index
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
            with open(shared_file, "a") as out:  # one line per record, in the order the ranks wrote them
                out.write(f"{record.getMessage()}\n")

    logger = get_logger("accel.integration.logging", log_level="INFO")
    logger.logger.addHandler(Keep())
    logger.logger.propagate = False
    logger.info("default from %d", rank)
    logger.warning("everywhere from %d", rank, main_process_only=False)
    state.wait_for_everyone()
    if rank == 0:
        time.sleep(1.0)  # without in_order, rank 1 would write first
    logger.info("ordered from %d", rank, main_process_only=False, in_order=True)
    logger.debug("below the level from %d", rank, main_process_only=False)
    state.wait_for_everyone()
    return records


def test_main_process_only_by_default_and_in_order_on_request_launch(tmp_path):
    shared_file = tmp_path / "records.txt"
    results = run_on_ranks(log_on_every_rank, 2, str(shared_file))
    assert results[0] == ["default from 0", "everywhere from 0", "ordered from 0"]
    assert results[1] == ["everywhere from 1", "ordered from 1"]
    lines = shared_file.read_text().splitlines()
    ordered = [line for line in lines if line.startswith("ordered")]
    assert ordered == ["ordered from 0", "ordered from 1"]
