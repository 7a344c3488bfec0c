"""Loopback ports for the lab's components.

Ports are picked by binding port 0 and releasing it; every port of one lab is held until all
are picked, so one lab never gets the same port twice. Another program may still take a port
between the pick and the component's own bind: the component then exits with "address already
in use" and ``lab up`` reports it with the component's log.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

HOST = "127.0.0.1"


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """One free loopback port per name."""
    with contextlib.ExitStack() as stack:
        ports: dict[str, int] = {}
        for name in names:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports[name] = sock.getsockname()[1]
        return ports


def in_use(port: int, host: str = HOST) -> bool:
    """True when something already listens on (or holds) ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
