#!/usr/bin/env python3
"""A C program (libnotifyd), a Swift program (the Notify library) and a Python program (the notifyd package)
exchange notifications through one daemon: each posts to the other two and receives from both, with the
kernel's pid of the poster.

  exchange.py --bin .build/debug --c-peer libnotifyd/build/tests/c_peer
"""
import argparse
import os
import select
import subprocess
import sys
import tempfile
import time

TIMEOUT = 30.0
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import notifyd  # noqa: E402


def fail(message):
    print(f"FAIL: {message}", flush=True)
    raise SystemExit(1)


def read_line(process, what):
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    if not ready:
        fail(f"timed out waiting for {what}")
    line = process.stdout.readline()
    if not line:
        fail(f"{what}: the process ended ({process.wait()})")
    return line.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the directory with notifyd and notify-test-peer")
    parser.add_argument("--c-peer", required=True, help="the C peer built against libnotifyd")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="xlang-")
    socket_path = os.path.join(directory, "s.sock")
    env = dict(os.environ, NOTIFYD_SOCKET=socket_path)
    processes = []

    def start(command):
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        processes.append(process)
        return process

    try:
        daemon = subprocess.Popen([os.path.join(args.bin, "notifyd"), "--socket", socket_path],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(daemon)
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(socket_path):
            if time.monotonic() > deadline:
                fail("notifyd did not create its socket")
            time.sleep(0.01)

        swift = start([os.path.join(args.bin, "notify-test-peer"), "observe", "--socket", socket_path,
                       "--name", "xl.to_swift", "--count", "2"])
        c = start([args.c_peer, "xl.to_c", "2"])
        if read_line(swift, "the Swift observer") != "ready" or read_line(c, "the C peer") != "ready":
            fail("a peer did not start")
        received_by_python = []
        with notifyd.Center(socket_path) as center:
            observation = center.observe("xl.to_python", lambda n: received_by_python.append((n.sender.pid, n.text)),
                                         executor=notifyd.READER_THREAD)
            # Python posts (acknowledged), C posts, Swift posts.
            for name in ("xl.to_swift", "xl.to_c"):
                if center.post(name, "from-python").delivered_count != 1:
                    fail(f"Python's post to {name} reached no one")
            c.stdin.write("post xl.to_swift from-c\npost xl.to_python from-c\n")
            c.stdin.flush()
            for name in ("xl.to_c", "xl.to_python"):
                poster = subprocess.run([os.path.join(args.bin, "notify-test-peer"), "post", "--socket", socket_path,
                                         "--name", name, "--count", "1", "--prefix", "from-swift-"],
                                        env=env, capture_output=True, text=True, timeout=TIMEOUT)
                if poster.returncode != 0:
                    fail(f"the Swift poster failed: {poster.stderr}")
            swift_lines = [read_line(swift, "the Swift observer's notifications") for _ in range(2)]
            c_lines = [read_line(c, "the C peer's notifications") for _ in range(2)]
            deadline = time.monotonic() + TIMEOUT
            while len(received_by_python) < 2:
                if time.monotonic() > deadline:
                    fail(f"Python received only {received_by_python}")
                time.sleep(0.01)
            observation.cancel()

        python_pid, c_pid = os.getpid(), c.pid
        swift_got = sorted((int(line.split()[0]), line.split()[2]) for line in swift_lines)
        if swift_got != sorted([(python_pid, "from-python"), (c_pid, "from-c")]):
            fail(f"the Swift program received {swift_got}")
        c_got = sorted((line.split()[2], line.split()[3]) for line in c_lines)
        if c_got != [("xl.to_c", "from-python"), ("xl.to_c", "from-swift-0")]:
            fail(f"the C program received {c_got}")
        if int(c_lines[[line.split()[3] for line in c_lines].index("from-python")].split()[1]) != python_pid:
            fail(f"the C program saw the wrong pid for Python's post: {c_lines}")
        texts = sorted(text for _, text in received_by_python)
        if texts != ["from-c", "from-swift-0"] or (c_pid, "from-c") not in received_by_python:
            fail(f"the Python program received {received_by_python}")
        for process in (swift, c):
            if process.wait(timeout=TIMEOUT) != 0:
                fail(f"{process.args[0]} exited with {process.returncode}")
        print("ok - C, Swift and Python exchanged notifications through one daemon, each with its poster's pid")
        return 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())
