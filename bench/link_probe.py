#!/usr/bin/env python3
"""Measures what one emulated link really carries: a TCP receiver and sender, nothing else.

bench-network.sh runs the receiver in one namespace and the sender in another after shaping, so
the report shows the rate a benchmark actually saw next to the rate it asked tc for.

  link_probe.py recv ADDR PORT            prints "<bytes> <seconds> <gbit/s>" when the sender ends
  link_probe.py send ADDR PORT SECONDS    streams zeros for SECONDS
"""
import socket
import sys
import time

kChunk = 1 << 20


def recv(addr, port):
    with socket.create_server((addr, port)) as server:
        server.settimeout(30)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(30)
            buf = bytearray(kChunk)
            view = memoryview(buf)
            total = 0
            start = None
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                if start is None:
                    # Timed from the first byte so connection setup is not counted as idle link.
                    start = time.monotonic()
                total += n
            seconds = time.monotonic() - start if start else 0.0
    gbits = total * 8 / seconds / 1e9 if seconds > 0 else 0.0
    print(f"{total} {seconds:.3f} {gbits:.3f}")


def send(addr, port, seconds):
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=30)
            break
        except ConnectionRefusedError:
            # The receiver is started just before us; give it a moment to listen.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = bytes(kChunk)
    end = time.monotonic() + seconds
    with conn:
        while time.monotonic() < end:
            conn.sendall(payload)


def main(argv):
    if len(argv) == 4 and argv[1] == "recv":
        recv(argv[2], int(argv[3]))
    elif len(argv) == 5 and argv[1] == "send":
        send(argv[2], int(argv[3]), float(argv[4]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
