"""Measure a link between two emulated hosts with plain TCP sockets: throughput and RTT.

`python -m harness.launch.linkprobe serve ADDR PORT` in one namespace, `... client ADDR PORT
BYTES` in another; the client prints one JSON line. Runs before every emulated run, so the
results say what network they actually saw, not just what was configured.
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 64 * 1024
PINGS = 50


def serve(addr: str, port: int) -> None:
    with socket.create_server((addr, port)) as srv:
        srv.settimeout(60)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(60)
            for _ in range(PINGS):  # echo the pings
                conn.sendall(conn.recv(1))
            total = int.from_bytes(conn.recv(8), "big")
            got = 0
            while got < total:
                data = conn.recv(CHUNK)
                if not data:
                    break
                got += len(data)
            conn.sendall(b"k")


def client(addr: str, port: int, nbytes: int) -> dict[str, float]:
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(PINGS):
            start = time.perf_counter()
            sock.sendall(b"p")
            sock.recv(1)
            rtts.append(time.perf_counter() - start)
        sock.sendall(nbytes.to_bytes(8, "big"))
        payload = b"\0" * CHUNK
        start = time.perf_counter()
        sent = 0
        while sent < nbytes:
            sock.sendall(payload[: min(CHUNK, nbytes - sent)])
            sent += min(CHUNK, nbytes - sent)
        sock.recv(1)
        elapsed = time.perf_counter() - start
    rtts.sort()
    return {"bytes": nbytes, "seconds": elapsed, "throughput_bits_s": nbytes * 8 / elapsed,
            "rtt_median_s": rtts[len(rtts) // 2]}


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
