"""A job stays on its machine and dies with its launcher: real `accel launch` jobs of 2 gloo ranks."""

from __future__ import annotations

import datetime
import inspect
import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accel_launch import notebook_launcher
from accel_launch.testing.ranks import launch_script

# /proc, and the parent-death signal, are Linux's.
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; Linux only")

# A forked rank that hangs fails its test within this, not after torch's 30 minutes.
FORKED_RANK_TIMEOUT = datetime.timedelta(seconds=120)


def process_tree(root: int) -> list[int]:
    """Return `root` and every process below it (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = entry.joinpath("stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rfind(")") + 2 :].split()[1]), []).append(int(entry.name))
    found, stack = [root], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def listening_sockets(pids: list[int]) -> list[dict[str, object]]:
    """Return the TCP sockets in LISTEN state that `pids` hold: their holders, address, port, is_loopback."""
    holders: dict[str, list[int]] = {}  # a forked child holds its parent's sockets too
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue  # the process ended, or one of its descriptors closed while being read
        for link in links:
            if link.startswith("socket:["):
                holders.setdefault(link[8:-1], []).append(pid)
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in holders:  # 0A: TCP_LISTEN; 9: the inode
                continue
            hex_address, hex_port = fields[1].split(":")
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8))
            address = ipaddress.ip_address(raw)
            mapped = getattr(address, "ipv4_mapped", None)
            found.append({
                "pids": sorted(holders[fields[9]]),
                "address": str(address),
                "port": int(hex_port, 16),
                "loopback": (mapped or address).is_loopback,
            })  # fmt: skip
    return found


# Each rank records, once every rank has its process group up, what the job's processes listen on.
LISTENING_SCRIPT = (
    "import ipaddress, json, os, sys\n"
    "from pathlib import Path\n"
    + inspect.getsource(process_tree)
    + inspect.getsource(listening_sockets)
    + textwrap.dedent(
        """
        import torch.distributed as dist
        from accel_state import PartialState

        state = PartialState()  # the process group as the library sets it up (gloo on the CPU)
        dist.barrier()
        agent = os.getppid()  # the launcher, which runs torch's elastic agent
        sockets = listening_sockets(process_tree(agent))  # the agent, its workers and theirs
        record = {"agent": agent, "sockets": sockets}
        Path(sys.argv[1], f"sockets_{state.process_index}.json").write_text(json.dumps(record))
        dist.barrier()
        """
    )
)

SLEEPER_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    pid_file = Path(sys.argv[1], f"pid_{os.environ['RANK']}")
    pid_file.with_suffix(".partial").write_text(str(os.getpid()))
    os.replace(pid_file.with_suffix(".partial"), pid_file)
    time.sleep(120)
    """
)


@pytest.mark.slow
def test_launch_two_ranks_listen_on_loopback_only(tmp_path):
    script = tmp_path / "listening.py"
    script.write_text(LISTENING_SCRIPT)
    result = launch_script(script, 2, [tmp_path], timeout=120)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        record = json.loads((tmp_path / f"sockets_{rank}.json").read_text())
        sockets = record["sockets"]
        assert any(record["agent"] in entry["pids"] for entry in sockets), f"no store found: {sockets}"
        beyond = [entry for entry in sockets if not entry["loopback"]]
        assert beyond == [], f"listening beyond loopback: {beyond}"


def _wait_for_pids(folder: Path, count: int, process: subprocess.Popen[bytes], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(folder.glob("pid_*[0-9]"))
        if len(files) == count:
            return [int(path.read_text()) for path in files]
        assert process.poll() is None, f"the launcher ended early (exit code {process.returncode})"
        time.sleep(0.1)
    raise AssertionError(f"the workers did not start within {timeout:g} s")


@pytest.mark.slow
def test_sigkill_of_the_launcher_ends_its_two_ranks(tmp_path, running_pids):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER_SCRIPT)
    command = [sys.executable, "-m", "accel_launch.commands.cli", "launch", "--cpu", "--num_processes", "2",
               str(script), str(tmp_path)]  # fmt: skip
    log = (tmp_path / "launcher.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workers: list[int] = []
    try:
        workers = _wait_for_pids(tmp_path, 2, process, timeout=90)
        process.send_signal(signal.SIGKILL)  # the agent runs in this process: it goes too
        assert process.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while running_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running_pids(tmp_path) == [], "a worker outlived its SIGKILLed launcher"
    finally:
        for pid in [process.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


def notebook_rank_sockets() -> list[dict[str, object]]:
    """Return what this rank, its peers and the agent's store listen on (run by notebook_launcher)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=FORKED_RANK_TIMEOUT)
    dist.barrier()
    agent = os.getppid()
    workers = [pid for pid in process_tree(agent) if pid != agent]
    store_port = int(os.environ["MASTER_PORT"])
    # The agent is this test process, which may hold other tests' sockets (and the forked ranks with
    # it): of the sockets it holds, only the store's are the job's.
    sockets = [
        entry
        for entry in listening_sockets([agent, *workers])
        if agent not in entry["pids"] or entry["port"] == store_port
    ]
    dist.barrier()
    dist.destroy_process_group()
    return sockets


@pytest.mark.slow
def test_notebook_launcher_two_ranks_listen_on_loopback_only():
    for sockets in notebook_launcher(notebook_rank_sockets, num_processes=2, cpu=True):
        assert any(os.getpid() in entry["pids"] for entry in sockets), f"the store was not found: {sockets}"
        beyond = [entry for entry in sockets if not entry["loopback"]]
        assert beyond == [], f"listening beyond loopback: {beyond}"
