#!/usr/bin/env python3
"""What two things one user can do cost the daemon and everyone else (BENCHMARKS F31).

    python3 Benchmarks/hostile_costs.py repeated BINARY [subscriptions] [rounds]
        A connection subscribes to one name `subscriptions` times, then unsubscribes and resubscribes the strongest of
        those subscriptions `rounds` times, pipelined, without reading its replies; another client pings meanwhile.
        Prints how long the daemon took to answer every request and the other client's round trips meanwhile.
    python3 Benchmarks/hostile_costs.py retained BINARY [names] [name length]
        Retains an empty payload on `names` distinct names (as root: exempt from quotas) and prints the daemon's RSS
        growth per name: why each retained notification is charged 512 bytes plus its name.

Each starts BINARY (a notifyd) on a private socket and stops it.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from wire import bare, hello, subscribe, unsubscribe

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

PING, PONG = 0x05, 0x84


@contextmanager
def daemon(binary: str):
    """A notifyd on a private socket: yields (its process, the socket's path)."""
    path = os.path.join(tempfile.mkdtemp(prefix="notifyd-hostile-"), "d.sock")
    process = subprocess.Popen([binary, "--socket", path, "--log-level", "warning", "--log", "stderr"])
    try:
        deadline = time.time() + 20
        while not os.path.exists(path):
            if time.time() > deadline or process.poll() is not None:
                sys.exit("the daemon did not start")
            time.sleep(0.05)
        yield process, path
    finally:
        process.terminate()
        process.wait()


def frame_types(sock: socket.socket):
    """Yields the type byte of each frame read from `sock`, reading as needed."""
    buffer = bytearray()
    while True:
        while len(buffer) >= 5:
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


def repeated(binary: str, subscriptions: int = 20_000, rounds: int = 2_000) -> None:
    with daemon(binary) as (_, path):
        def connect(name: bytes) -> socket.socket:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            sock.sendall(hello(name))
            return sock

        victim, attacker = connect(b"victim"), connect(b"attacker")
        requests = [subscribe(i, i, b"repeated.name") for i in range(2, subscriptions + 2)]
        requests.append(subscribe(1, 1, b"repeated.name", policy=1, limit=100))  # the strongest: queue(100)
        for r in range(rounds):
            requests.append(unsubscribe(1_000_000 + 2 * r, 1))
            requests.append(subscribe(1_000_001 + 2 * r, 1, b"repeated.name", policy=1, limit=100))
        expected = len(requests) + 1  # and WELCOME
        answered = []

        def read_replies() -> None:
            count = 0
            for _ in frame_types(attacker):
                count += 1
                if count == expected:
                    break
            answered.append(count)

        stop = threading.Event()
        round_trips: list[float] = []

        def ping() -> None:
            replies = frame_types(victim)
            request = 0
            while not stop.is_set():
                request += 1
                start = time.perf_counter()
                victim.sendall(bare(PING, request))
                for kind in replies:
                    if kind == PONG:
                        break
                round_trips.append(time.perf_counter() - start)

        reader = threading.Thread(target=read_replies)
        reader.start()
        started = time.perf_counter()
        threading.Thread(target=attacker.sendall, args=(b"".join(requests),)).start()
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


def retained(binary: str, count: int = 200_000, length: int = 12) -> None:
    import notifyd

    if os.geteuid() != 0:
        sys.exit("run as root: other users' retained notifications stop at their quota")
    length = max(8, length)

    def rss_kib(pid: int) -> int:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    with daemon(binary) as (process, path):
        center = notifyd.Center(path)
        center.post("warm.up", b"", retain=True)
        before = rss_kib(process.pid)
        for i in range(count):
            center.post_nowait(f"r.{i:0{length - 2}d}", b"", retain=True)
        center.post("done", b"")  # acknowledged: every post before it was served
        after = rss_kib(process.pid)
        center.close()
        print(f"{count:,} empty retained payloads on names of {length} bytes: daemon RSS {before:,} → {after:,} KiB, "
              f"{(after - before) * 1024 / count:.0f} B per name")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("repeated", "retained"):
        sys.exit(__doc__)
    numbers = [int(x) for x in sys.argv[3:]]
    (repeated if sys.argv[1] == "repeated" else retained)(sys.argv[2], *numbers)
