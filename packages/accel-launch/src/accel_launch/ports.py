"""Free TCP ports for a single-machine rendezvous."""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"


def find_free_port(host: str = LOCALHOST) -> int:
    """Return a TCP port on `host` that nothing listens on right now.

    The kernel picks it (bind to port 0), so two jobs started at once do not both take 29500.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
