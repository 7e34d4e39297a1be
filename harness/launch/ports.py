"""Free TCP ports for rendezvous, on the address the processes will bind (never 0.0.0.0)."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the kernel says are free now, held open together so they are distinct.

    Another program may take one before our workers bind it; the launcher treats
    'address already in use' as a retryable start failure and picks new ports.
    """
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
