"""SLURM's compressed host lists, task counts and the rendezvous port every task of a step derives."""

from __future__ import annotations

import pytest

from accel_state.environment.slurm import PORT_BASE, PORT_SPAN, first_host, job_port, tasks_per_node


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("localhost", "localhost"),
        ("node[07-09,12],gpu3", "node07"),
        ("gpu3,node[1-2]", "gpu3"),
        ("node[3,1-2]", "node3"),
        ("rack[2-3]-node[001-004]", "rack2-node001"),
        ("", None),
        (None, None),
    ],
)
def test_first_host_of_a_compressed_list(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize(
    ("raw", "node", "count"),
    [("2(x3),1", 2, 2), ("2(x3),1", 3, 1), ("4", 0, 4), ("4", 1, None), (None, 0, None), ("x", 0, None)],
)
def test_tasks_per_node(raw, node, count):
    assert tasks_per_node(raw, node) == count


def test_job_port_is_the_same_for_a_step_and_differs_between_jobs_and_steps():
    assert job_port(1234, 0) == job_port(1234, 0)
    ports = {job_port(job, step) for job in range(1000, 1100) for step in range(4)}
    assert len(ports) == 400
    assert all(PORT_BASE <= port < PORT_BASE + PORT_SPAN for port in ports)
    assert PORT_BASE + PORT_SPAN <= 32768  # below Linux's ephemeral ports
