#!/usr/bin/env python3
"""The daemon's memory per retained notification with an empty payload (BENCHMARKS F31: why each one is charged
512 bytes plus its name against retained-bytes-per-uid).

    python3 Benchmarks/retained_memory.py .build-bench/release/notifyd [names] [name length]

Starts the given daemon on a private socket, retains an empty payload on `names` distinct names (as root: exempt
from quotas) and prints the daemon's RSS growth per name.
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import notifyd  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("run as root: other users' retained notifications stop at their quota")
    binary = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    length = max(8, int(sys.argv[3]) if len(sys.argv) > 3 else 12)
    path = os.path.join(tempfile.mkdtemp(prefix="notifyd-retained-"), "d.sock")
    daemon = subprocess.Popen([binary, "--socket", path, "--log-level", "warning", "--log", "stderr"])
    try:
        deadline = time.time() + 20
        while not os.path.exists(path):
            if time.time() > deadline or daemon.poll() is not None:
                sys.exit("the daemon did not start")
            time.sleep(0.05)
        center = notifyd.Center(path)
        center.post("warm.up", b"", retain=True)
        before = rss_kib(daemon.pid)
        for i in range(count):
            center.post_nowait(f"r.{i:0{length - 2}d}", b"", retain=True)
        center.post("done", b"")  # acknowledged: every post before it was served
        after = rss_kib(daemon.pid)
        print(f"{count:,} empty retained payloads on names of {length} bytes: daemon RSS {before:,} → {after:,} KiB, "
              f"{(after - before) * 1024 / count:.0f} B per name")
        center.close()
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
