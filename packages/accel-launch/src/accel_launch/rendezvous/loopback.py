"""The rendezvous of a one-machine job: torch's static rendezvous, with a store that listens on loopback only.

torchrun's static and c10d rendezvous use their address only to connect: the TCPStore server they
open binds every interface (`*:<port>`), so the store of a job that never leaves this machine
is reachable from the network. This handler gives the TCPStore a socket already bound to the
loopback address (TCPStore's `master_listen_fd`), so nothing of the job listens beyond the machine.

The workers use the same store (torchrun's "agent store"), as under the static rendezvous. The module
imports torch; only the runner and `notebook_launcher` load it.
"""

from __future__ import annotations

import datetime
import socket

from torch.distributed import PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from accel_launch.rendezvous.ports import LOOPBACK_RDZV_BACKEND, is_loopback

BACKEND = LOOPBACK_RDZV_BACKEND
# As torchrun's static rendezvous: how long a store operation may wait.
_TIMEOUT = datetime.timedelta(seconds=600)


class LoopbackRendezvous(RendezvousHandler):
    """A one-node rendezvous whose TCPStore listens on the loopback address `host` only."""

    def __init__(self, host: str, port: int, run_id: str, timeout: datetime.timedelta = _TIMEOUT) -> None:
        if not is_loopback(host):
            raise ValueError(f"the {BACKEND} rendezvous needs a loopback address, got {host!r}")
        self.host = host
        self.port = port
        self.run_id = run_id
        self.timeout = timeout
        self._server: TCPStore | None = None

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return True

    def next_rendezvous(self) -> RendezvousInfo:
        # One store for the whole job: a restarted worker group keeps it, as under the static rendezvous.
        if self._server is None:
            # The workers get the address bound, not a name: `localhost` may resolve to ::1 for one
            # process and to 127.0.0.1 for another.
            self._server, self.host = _loopback_store(self.host, self.port, self.timeout)
            self.port = self._server.port
        # The agent gets a client of its own: whatever keeps the agent alive after the job (a logged
        # traceback's frames) then keeps a closed connection, not the server and its thread.
        client = TCPStore(self.host, self.port, is_master=False, timeout=self.timeout)
        store: Store = PrefixStore(self.run_id, client)
        return RendezvousInfo(store, 0, 1, RendezvousStoreInfo(self.host, self.port))

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        # The agent calls this when the job ends: the server's thread stops with its only reference.
        self._server = None
        return True


def _loopback_store(host: str, port: int, timeout: datetime.timedelta) -> tuple[TCPStore, str]:
    """Return a TCPStore server listening on `host`:`port` only (port 0: any) and the address it bound."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    bound_host = str(address[0])
    listener = socket.socket(family, kind, proto)
    try:
        # As TCPStore does for its own socket: a port of a job that just ended may still be in TIME_WAIT.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(socket.SOMAXCONN)
        store = TCPStore(
            bound_host,
            listener.getsockname()[1],
            world_size=1,
            is_master=True,
            timeout=timeout,
            multi_tenant=True,
            master_listen_fd=listener.fileno(),
        )
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the descriptor now and closes it
    return store, bound_host


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """Return the handler for torchrun's `--rdzv_backend accel-loopback --rdzv_endpoint HOST:PORT`."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=0)
    if params.max_nodes != 1:
        raise ValueError(f"the {BACKEND} rendezvous runs one machine, got --nnodes {params.max_nodes}")
    timeout = params.get("timeout")
    return LoopbackRendezvous(
        host,
        port,
        params.run_id,
        _TIMEOUT if timeout is None else datetime.timedelta(seconds=int(timeout)),
    )


def register() -> None:
    """Make `accel-loopback` a rendezvous backend torchrun knows, in this process (idempotent)."""
    rendezvous_handler_registry.register(BACKEND, create_handler)
