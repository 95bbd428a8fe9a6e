#!/usr/bin/env python3
"""The rate one TCP stream gets between two emulated nodes: the physical bound of the test bed.

Run by tests/netns/testbed.sh on 2 nodes of 1 rank: rank 1 sends BYTES to rank 0 over one
connection, as fast as the kernel takes it; rank 0 times from the first to the last byte and
prints "link_rate_bytes_per_s <rate>". Uses the variables the test bed sets (CHORUS_RANK,
CHORUS_IFADDR, CHORUS_ADDR). Bounded: every socket has a 120 s timeout.

usage: testbed.sh --nodes 2 --rate 500mbit -- python3 perf/link_rate.py [BYTES [HOST]]

HOST: the address rank 0 listens on and rank 1 connects to (default: rank 0's CHORUS_IFADDR),
e.g. 10.98.0.1 for the second link of `testbed.sh --rates`.
"""
import os
import socket
import sys
import time

PORT = 29611
CHUNK = 1 << 20


def receive(total, host):
    srv = socket.create_server((host or os.environ["CHORUS_IFADDR"], PORT))
    srv.settimeout(120)
    conn, _ = srv.accept()
    conn.settimeout(120)
    got, start, first = 0, None, 0
    while got < total:
        data = conn.recv(CHUNK)
        if not data:
            sys.exit(f"link_rate: the sender stopped after {got} of {total} bytes")
        if start is None:
            # Timed from the first arrival: the bytes of that arrival are not counted.
            start, first = time.monotonic(), len(data)
        got += len(data)
    elapsed = time.monotonic() - start
    conn.sendall(b"k")
    print(f"link_rate_bytes_per_s {(total - first) / elapsed:.0f}")


def send(total, host):
    host = host or os.environ["CHORUS_ADDR"].rsplit(":", 1)[0]
    buf = b"\0" * CHUNK
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((host, PORT), timeout=120)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sent = 0
    while sent < total:
        n = min(CHUNK, total - sent)
        conn.sendall(buf[:n])
        sent += n
    conn.recv(1)


def main():
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    host = sys.argv[2] if len(sys.argv) > 2 else None
    rank = int(os.environ["CHORUS_RANK"])
    if rank == 0:
        receive(total, host)
    elif rank == 1:
        send(total, host)


if __name__ == "__main__":
    main()
