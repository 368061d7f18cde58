#!/usr/bin/env python3
"""A connection that subscribes to one name many times, then unsubscribes and resubscribes the strongest of those
subscriptions in a loop, without reading its replies; another client's PING round trips meanwhile (BENCHMARKS F31).

    python3 Benchmarks/repeated_subscriptions.py .build-bench/release/notifyd [subscriptions] [rounds]

Starts the given daemon on a private socket, prints one line: how long the daemon took to answer every request of
the loop, and the other client's round trips during it (count, median, max).
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from notifyd import _wire as wire  # noqa: E402

PONG = wire.Pong.TYPE


def frames_of(sock: socket.socket, buffer: bytearray):
    """Yields (type, whole frame length) of each frame read from `sock`, reading as needed."""
    while True:
        while len(buffer) >= 4:
            (length,) = struct.unpack(">I", buffer[:4])
            if len(buffer) < 4 + length:
                break
            kind = buffer[4]
            del buffer[:4 + length]
            yield kind
        chunk = sock.recv(1 << 20)
        if not chunk:
            return
        buffer += chunk


def main() -> None:
    binary = sys.argv[1]
    subscriptions = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2_000
    directory = tempfile.mkdtemp(prefix="notifyd-repeated-")
    path = os.path.join(directory, "d.sock")
    daemon = subprocess.Popen([binary, "--socket", path, "--log-level", "warning", "--log", "stderr"])
    try:
        deadline = time.time() + 20
        while not os.path.exists(path):
            if time.time() > deadline or daemon.poll() is not None:
                sys.exit("the daemon did not start")
            time.sleep(0.05)

        def connect(name: str) -> socket.socket:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            sock.sendall(wire.Hello(1, 0, name).encode())
            return sock

        victim, attacker = connect("victim"), connect("attacker")
        requests = [wire.Subscribe(i, i, 0, 0, 0, "repeated.name").encode() for i in range(2, subscriptions + 2)]
        requests.append(wire.Subscribe(1, 1, 0, 1, 100, "repeated.name").encode())  # the strongest: queue(100)
        for r in range(rounds):
            requests.append(wire.Unsubscribe(1_000_000 + 2 * r, 1).encode())
            requests.append(wire.Subscribe(1_000_001 + 2 * r, 1, 0, 1, 100, "repeated.name").encode())
        expected = len(requests) + 1  # and WELCOME

        answered = []

        def read_replies() -> None:
            count = 0
            for _ in frames_of(attacker, bytearray()):
                count += 1
                if count == expected:
                    break
            answered.append(count)

        stop = threading.Event()
        round_trips: list[float] = []

        def ping() -> None:
            buffer = bytearray()
            replies = frames_of(victim, buffer)
            request = 0
            while not stop.is_set():
                request += 1
                start = time.perf_counter()
                victim.sendall(wire.Ping(request).encode())
                for kind in replies:
                    if kind == PONG:
                        break
                round_trips.append(time.perf_counter() - start)

        reader = threading.Thread(target=read_replies)
        reader.start()
        started = time.perf_counter()
        sender = threading.Thread(target=attacker.sendall, args=(b"".join(requests),))
        sender.start()
        pinger = threading.Thread(target=ping)
        pinger.start()
        reader.join(timeout=900)
        elapsed = time.perf_counter() - started
        stop.set()
        pinger.join(timeout=30)
        round_trips.sort()
        if not round_trips:
            sys.exit("the other client completed no round trip")
        print(f"{subscriptions:,} subscriptions to one name, then {rounds:,} × (UNSUBSCRIBE, SUBSCRIBE) of the strongest: "
              f"{answered[0] if answered else 0:,}/{expected:,} replies in {elapsed:.2f} s; another client's round trips "
              f"meanwhile: {len(round_trips)}, median {round_trips[len(round_trips) // 2] * 1e3:.2f} ms, "
              f"max {round_trips[-1] * 1e3:.1f} ms")
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
