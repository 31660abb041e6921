"""The real tracking libraries, offline: every test runs in its own folder, with its own HOME, and
no socket may leave the machine (a library that tries gets a refused connection, which it handles)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Read when the libraries are imported (trackio fixes its storage folder then): set before collection.
_TRACKIO_DIR = tempfile.mkdtemp(prefix="accel-trackio-")
OFFLINE_ENV = {
    "DO_NOT_TRACK": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DISABLE_GIT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "COMET_START_ONLINE": "false",
    "CLEARML_OFFLINE_MODE": "1",
    "DVC_NO_ANALYTICS": "1",
    "ITERATIVE_DO_NOT_TRACK": "1",
    "SWANLAB_MODE": "offline",
    "HF_HUB_OFFLINE": "1",
    "TRACKIO_DIR": _TRACKIO_DIR,
}
os.environ.update(OFFLINE_ENV)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_TRACKIO_DIR, ignore_errors=True)


def _is_local(address: Any) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX: a path
        return True
    host = address[0]
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Run the test in `tmp_path` with HOME there; refuse every connection and name lookup that
    is not local. Yields the refused addresses."""
    refused: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            refused.append(str(address))
            raise ConnectionRefusedError(f"network disabled in the trackers tests: {address}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            refused.append(str(address))
            return 111  # ECONNREFUSED
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_local((host.decode() if isinstance(host, bytes) else host, 0)):
            refused.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"name lookup disabled in the trackers tests: {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    yield refused
