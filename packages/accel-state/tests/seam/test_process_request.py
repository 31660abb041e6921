"""`setup_process` of the seam calls a factory in either form it takes: one `ProcessRequest`, or
accel 0.1's keywords (`process_group` only when the user asked for something)."""

from __future__ import annotations

import datetime

import torch

from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.launch_env import LaunchEnvironment
from accel_state.seam.backend import ProcessGroupOptions, ProcessRequest, ProcessSetup, setup_process
from accel_state.seam.communication import TorchCommunicator

LONE = LaunchEnvironment(rank=0, world_size=1, local_rank=0, local_world_size=1)
TIMEOUT = datetime.timedelta(seconds=7)


def _setup() -> ProcessSetup:
    return ProcessSetup(DistributedType.NO, torch.device("cpu"), None, TorchCommunicator())


class RequestFactory:
    seen: list[ProcessRequest] = []

    @classmethod
    def setup_process(cls, request: ProcessRequest) -> ProcessSetup:
        cls.seen.append(request)
        return _setup()


class KeywordFactory:
    seen: list[dict] = []

    @classmethod
    def setup_process(cls, launch, *, cpu, timeout, **extra):
        cls.seen.append({"launch": launch, "cpu": cpu, "timeout": timeout, **extra})
        return _setup()


class OldestFactory:
    @classmethod
    def setup_process(cls, launch, *, cpu, timeout):
        return _setup()


def test_a_request_factory_gets_the_whole_request():
    asked = ProcessRequest(LONE, True, TIMEOUT, ProcessGroupOptions(backend="gloo"))
    assert setup_process(RequestFactory, asked).device == torch.device("cpu")
    assert RequestFactory.seen[-1] is asked


def test_a_keyword_factory_gets_the_process_group_only_when_asked():
    setup_process(KeywordFactory, ProcessRequest(LONE, True, TIMEOUT))
    assert KeywordFactory.seen[-1] == {"launch": LONE, "cpu": True, "timeout": TIMEOUT}
    group = ProcessGroupOptions(init_method="tcp://127.0.0.1:1234")
    setup_process(KeywordFactory, ProcessRequest(LONE, False, TIMEOUT, group))
    assert KeywordFactory.seen[-1]["process_group"] == group
    assert KeywordFactory.seen[-1]["cpu"] is False


def test_a_factory_without_the_process_group_parameter_keeps_working_unasked():
    assert setup_process(OldestFactory, ProcessRequest(LONE, True, TIMEOUT)).process_group_backend is None
