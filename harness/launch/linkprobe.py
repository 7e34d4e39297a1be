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

from harness.launch.priority import realtime_priority

CHUNK = 64 * 1024
PINGS = 50
# The probe's transfer is repeated this many times and the fastest counts: on a shared 2-core
# machine a scheduling hiccup only ever slows a transfer down, never speeds it up, so the
# fastest of a few is the best estimate of what the link itself carries.
TRIALS = 3


def serve(addr: str, port: int) -> None:
    with socket.create_server((addr, port)) as srv:
        srv.settimeout(60)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(60)
            for _ in range(PINGS):  # echo the pings
                conn.sendall(conn.recv(1))
            for _ in range(TRIALS):
                total = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
                got = 0
                while got < total:
                    data = conn.recv(min(CHUNK, total - got))
                    if not data:
                        return
                    got += len(data)
                conn.sendall(b"k")


def client(addr: str, port: int, nbytes: int) -> dict[str, float | list[float]]:
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
        payload = b"\0" * CHUNK
        each = max(1, nbytes)  # every trial as long as the whole probe used to be
        trials = []
        for _ in range(TRIALS):
            sock.sendall(each.to_bytes(8, "big"))
            start = time.perf_counter()
            sent = 0
            while sent < each:
                sock.sendall(payload[: min(CHUNK, each - sent)])
                sent += min(CHUNK, each - sent)
            sock.recv(1)
            trials.append(each * 8 / (time.perf_counter() - start))
    rtts.sort()
    return {"bytes": each * TRIALS, "throughput_bits_s": max(trials),
            "throughput_trials_bits_s": trials, "rtt_median_s": rtts[len(rtts) // 2]}


if __name__ == "__main__":
    # at the priority the comm sweeps' ranks run at, so that the RTT is the one they see:
    # at normal priority three probes of the same 4 links gave medians of 70-94 us, at
    # SCHED_RR 70-74 us
    realtime_priority()
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
