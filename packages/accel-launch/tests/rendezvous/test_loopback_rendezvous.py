"""The one-machine rendezvous: its store, opened in this process, listens on loopback only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accel_launch.rendezvous.ports import endpoint, is_loopback


def _listening_addresses(port: int) -> list[str]:
    """Return the local addresses (as /proc/net prints them) of the sockets listening on `port`."""
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net")
@pytest.mark.parametrize(("host", "bound", "proc_address"), [
    ("127.0.0.1", "127.0.0.1", "0100007F"),
    ("localhost", "127.0.0.1", "0100007F"),
])  # fmt: skip
def test_loopback_rendezvous_store_listens_on_loopback_only(host, bound, proc_address):
    from accel_launch.rendezvous.loopback import LoopbackRendezvous

    handler = LoopbackRendezvous(host, 0, "run")  # it owns the server: the agent holds it for the job
    info = handler.next_rendezvous()
    assert (info.rank, info.world_size) == (0, 1)
    assert info.bootstrap_store_info.master_addr == bound  # an address: every worker reaches the same one
    info.store.set("key", "value")
    assert info.store.get("key") == b"value"
    assert _listening_addresses(info.bootstrap_store_info.master_port) == [proc_address]
    handler.shutdown()
    assert _listening_addresses(info.bootstrap_store_info.master_port) == []  # the job's end closes it


def test_loopback_rendezvous_refuses_an_address_beyond_the_machine():
    from accel_launch.rendezvous.loopback import LoopbackRendezvous

    with pytest.raises(ValueError, match="needs a loopback address, got '10.0.0.5'"):
        LoopbackRendezvous("10.0.0.5", 0, "run")


def test_loopback_addresses_and_endpoints():
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(host) for host in ("10.0.0.5", "0.0.0.0", "::", "example.com"))
    assert endpoint("::1", 29500) == "[::1]:29500"
    assert endpoint("127.0.0.1", 29500) == "127.0.0.1:29500"
