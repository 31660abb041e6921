"""Addresses and free TCP ports for a single-machine rendezvous, which stays on the loopback interface."""

from __future__ import annotations

import ipaddress
import socket

LOCALHOST = "127.0.0.1"
# torchrun's `--rdzv_backend` for a one-machine job: a static rendezvous whose store listens on loopback
# only (accel_launch.rendezvous.loopback, registered by the runner).
LOOPBACK_RDZV_BACKEND = "accel-loopback"


def find_free_port(host: str = LOCALHOST) -> int:
    """Return a TCP port on `host` that nothing listens on right now.

    The kernel picks it (bind to port 0), so two jobs started at once do not both take 29500.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.bind(address)
        return int(sock.getsockname()[1])


def is_loopback(host: str) -> bool:
    """Return True when `host` is `localhost` or a loopback address (127.0.0.0/8, ::1)."""
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def endpoint(host: str, port: int) -> str:
    """Return `host:port`, with an IPv6 address in brackets (`[::1]:29500`)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def loopback_interface() -> str | None:
    """Return the name of the loopback network interface (`lo` on Linux, `lo0` on macOS), if one is found."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def bind_error(host: str, port: int) -> OSError | None:
    """Return why a server could not listen on `host:port` now (None when it could); "" is every interface.

    Bound with SO_REUSEADDR, as torch's store binds: a port left in TIME_WAIT by an earlier job
    is free, one a live process listens on is not.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as error:
        return error
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen(1)
        except OSError as error:
            return error
    return None
