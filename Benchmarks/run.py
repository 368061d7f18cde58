#!/usr/bin/env python3
"""notifyd benchmarks: every system through the same scenarios, in one run, on private Unix sockets.

    python3 Benchmarks/run.py            # full run (make bench)
    BENCH_QUICK=1 python3 Benchmarks/run.py   # shorter: fewer repetitions, smaller counts
    python3 Benchmarks/run.py --smoke    # seconds: tiny counts, debug build, no timing claims (make bench-smoke)

Systems: notifyd through the C client (Benchmarks/C, written from protocol/PROTOCOL.md) and through the Swift
library (Benchmarks/SwiftClient/notify-bench, in the benchmark package Benchmarks/Package.swift); Redis pub/sub
over a Unix socket (hiredis); D-Bus broadcast signals through a private dbus-broker and a private dbus-daemon
(sd-bus); the C epoll relay. A peer that is not installed is reported as skipped. Results:
Benchmarks/results/latest.json and latest.md (which BENCHMARKS.md includes), and PNG charts of them in
Benchmarks/charts/ (drawn by Benchmarks/charts.py with matplotlib, which a full run installs with pip when it is
missing). See Benchmarks/BENCHMARKS.md for what each scenario measures.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import mmap
import os
import platform
import re
import resource
import shutil
import signal
import site
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import charts  # Benchmarks/charts.py (beside this file); imports matplotlib only when it draws

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "Benchmarks"
RESULTS = BENCH / "results"
SLOT = 64
HEADER = 64
TICK = os.sysconf("SC_CLK_TCK")

children: list[subprocess.Popen] = []


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- process helpers

def spawn(cmd: list[str], env: dict | None = None, stdout=subprocess.PIPE) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)
    children.append(proc)
    return proc


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[dict | None, str]:
    """Waits for a driver process and parses the JSON object it printed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        out, err = proc.communicate()
        err = (err or "") + f"\n(timed out after {timeout:.0f} s)"
    if proc in children:
        children.remove(proc)
    result = None
    for line in (out or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                pass
    return result, (err or "").strip()


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def stop_gently(proc: subprocess.Popen, timeout: float = 5) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
    if proc in children:
        children.remove(proc)


def kill_all_children() -> None:
    for proc in list(children):
        kill(proc)
    children.clear()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def memory_kib(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


def reset_peak_rss(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def wait_for_socket(path: str, proc: subprocess.Popen | None, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with status {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return
            except OSError:
                pass
            finally:
                s.close()
        time.sleep(0.02)
    raise RuntimeError(f"socket {path} did not come up within {timeout:.0f} s")


def version_of(cmd: list[str], pattern: str = r"(\d+(\.\d+)+)") -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    m = re.search(pattern, first)
    return m.group(1) if m else (first or None)


def pkg_version(name: str) -> str | None:
    try:
        r = subprocess.run(["pkg-config", "--modversion", name], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except OSError:
        return None


# ---------------------------------------------------------------- the board

class Board:
    """The shared-memory board of Benchmarks/C/bench.h."""

    def __init__(self, directory: Path, slots: int, tag: str):
        self.path = directory / f"board-{tag}-{time.monotonic_ns()}"
        size = HEADER + SLOT * max(slots, 1)
        with open(self.path, "wb") as f:
            f.write(b"\0" * size)
        self.file = open(self.path, "r+b")
        self.map = mmap.mmap(self.file.fileno(), size)

    def get(self, slot: int, field: int) -> int:
        return struct.unpack_from("<Q", self.map, HEADER + slot * SLOT + field * 8)[0]

    def set(self, slot: int, field: int, value: int) -> None:
        struct.pack_into("<Q", self.map, HEADER + slot * SLOT + field * 8, value)

    def stop(self) -> None:
        struct.pack_into("<Q", self.map, 8, 1)

    def wait_ready(self, slots: range, procs: list[subprocess.Popen], phase: int = 1, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while True:
            if all(self.get(s, 0) >= phase for s in slots):
                return
            for p in procs:
                if p.poll() is not None:
                    _, err = finish(p, 1)
                    raise RuntimeError(f"a client exited early ({p.returncode}): {err[-500:]}")
            if time.time() > deadline:
                raise RuntimeError(f"clients not ready (phase {phase}) within {timeout:.0f} s")
            time.sleep(0.005)

    def close(self) -> None:
        self.map.close()
        self.file.close()
        try:
            self.path.unlink()
        except OSError:
            pass


# ---------------------------------------------------------------- systems

class System:
    """One system under test: how to start it on private sockets and which client drives it."""
    key = ""
    label = ""
    driver = ""          # nbench --system value
    client = "c"         # "c" or "swift"
    server = ""          # which server process this measures (systems sharing a server share this)

    def __init__(self, ctx: "Context"):
        self.ctx = ctx
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.address = ""

    def available(self) -> tuple[bool, str]:
        return True, ""

    def runs(self, scenario: str) -> bool:
        """Whether this system takes part in `scenario` (all do, but clients that cannot play every role)."""
        return True

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None:
            stop_gently(self.proc)
        self.proc = None
        self.pid = None

    owner: "System | None" = None

    def restart(self) -> None:
        """Starts a fresh instance (systems sharing a server restart its owner and follow it)."""
        if self.owner is not None:
            self.owner.restart()
            self.address, self.pid = self.owner.address, self.owner.pid
            return
        self.stop()
        self.start()

    def client_cmd(self, role: str, *args: str) -> list[str]:
        if self.client == "swift":
            return [str(self.ctx.swift_bench), role, "--address", self.address, *args]
        return [str(self.ctx.nbench), role, "--system", self.driver, "--address", self.address, *args]

    def c_cmd(self, role: str, *args: str) -> list[str]:
        """The C driver against this system (helpers such as pattern holders always use it)."""
        driver = self.driver or "notifyd"
        return [str(self.ctx.nbench), role, "--system", driver, "--address", self.address, *args]


class Notifyd(System):
    key, label, driver, client, server = "notifyd-c", "notifyd (C client)", "notifyd", "c", "notifyd"
    socket_name = "notifyd.sock"

    def binary(self) -> Path:
        return self.ctx.notifyd

    def start(self, env_extra: dict | None = None) -> None:
        self.address = str(self.ctx.tmp / self.socket_name)
        env = dict(os.environ)
        env.update(env_extra or {})
        self.proc = spawn([str(self.binary()), "--socket", self.address, "--log-level", "warning", "--log", "stderr"],
                          env=env, stdout=subprocess.DEVNULL)
        wait_for_socket(self.address, self.proc)
        self.pid = self.proc.pid


class NotifydElsewhere(Notifyd):
    """A second notifyd on its own socket: the hostile scenario's control, attacked while the victim uses the first."""
    socket_name = "notifyd-elsewhere.sock"


class NotifydLib(Notifyd):
    """notifyd through libnotifyd, the C library with Darwin's notify(3) API (libnotifyd/), as a C program using it
    would: one connection per process, callbacks on an eventfd queue. Fan-out and round trips only: its one
    connection per process cannot play the many-connection roles, and its callbacks merge what arrives while one
    waits (Darwin's semantics), so flood counts would not compare."""
    key, label, driver, client, server = "notifyd-libnotifyd", "notifyd (libnotifyd)", "libnotifyd", "c", "notifyd"

    def available(self) -> tuple[bool, str]:
        return (True, "") if self.ctx.libnotifyd_built else (False, "libnotifyd did not build")

    def runs(self, scenario: str) -> bool:
        return scenario in ("fanout", "rtt")


class NotifydSwift(Notifyd):
    key, label, driver, client, server = "notifyd-swift", "notifyd (Swift library)", "notifyd", "swift", "notifyd"


class NotifydAlt(Notifyd):
    """Another build of notifyd (--alt-bin DIR), for before/after comparisons in the same run."""
    key, label, driver, client, server = "notifyd-c-alt", "notifyd ALT (C client)", "notifyd", "c", "notifyd-alt"
    socket_name = "notifyd-alt.sock"

    def binary(self) -> Path:
        return self.ctx.alt_bin / "notifyd"

    def available(self) -> tuple[bool, str]:
        path = self.binary()
        return (True, "") if path.exists() else (False, f"no {path}")


class NotifydSwiftAlt(NotifydAlt):
    key, label, driver, client, server = "notifyd-swift-alt", "notifyd ALT (Swift library)", "notifyd", "swift", "notifyd-alt"

    def available(self) -> tuple[bool, str]:
        ok, reason = super().available()
        path = self.ctx.alt_bench_bin / "notify-bench"
        if ok and not path.exists():
            ok, reason = False, f"no {path} (--alt-bench-bin: the bin directory of that build's Benchmarks package)"
        return ok, reason

    def client_cmd(self, role: str, *args: str) -> list[str]:
        return [str(self.ctx.alt_bench_bin / "notify-bench"), role, "--address", self.address, *args]


class Relay(System):
    key, label, driver, client, server = "relay", "C relay", "relay", "c", "relay"

    def start(self) -> None:
        self.address = str(self.ctx.tmp / "relay.sock")
        self.proc = spawn([str(self.ctx.relay), self.address], stdout=subprocess.DEVNULL)
        wait_for_socket(self.address, self.proc)
        self.pid = self.proc.pid


class Redis(System):
    key, label, driver, client, server = "redis", "Redis pub/sub", "redis", "c", "redis"

    def available(self) -> tuple[bool, str]:
        if not shutil.which("redis-server"):
            return False, "redis-server is not installed (apt-get install redis-server)"
        if not self.ctx.has_hiredis:
            return False, "hiredis is not installed (apt-get install libhiredis-dev)"
        return True, ""

    def start(self) -> None:
        self.address = str(self.ctx.tmp / "redis.sock")
        conf = self.ctx.tmp / "redis.conf"
        # Defaults otherwise (including the pub/sub output limit, which decides what a stopped subscriber costs).
        conf.write_text(f"port 0\nunixsocket {self.address}\nunixsocketperm 700\nsave \"\"\nappendonly no\n"
                        f"daemonize no\nmaxclients 20000\nloglevel warning\ndir {self.ctx.tmp}\n")
        self.proc = spawn(["redis-server", str(conf)], stdout=subprocess.DEVNULL)
        wait_for_socket(self.address, self.proc)
        self.pid = self.proc.pid


BUS_POLICY = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  {listen}
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
  <limit name="max_match_rules_per_connection">200000</limit>
  <limit name="max_connections_per_user">20000</limit>
  <limit name="max_completed_connections">20000</limit>
  <limit name="max_incomplete_connections">20000</limit>
</busconfig>
"""


class DbusDaemon(System):
    key, label, driver, client, server = "dbus-daemon", "dbus-daemon (sd-bus)", "dbus", "c", "dbus-daemon"

    def available(self) -> tuple[bool, str]:
        if not shutil.which("dbus-daemon"):
            return False, "dbus-daemon is not installed (apt-get install dbus-daemon)"
        if not self.ctx.has_sdbus:
            return False, "sd-bus headers are not installed (apt-get install libsystemd-dev)"
        return True, ""

    def start(self) -> None:
        self.address = str(self.ctx.tmp / "dbus-daemon.sock")
        conf = self.ctx.tmp / "dbus-daemon.conf"
        conf.write_text(BUS_POLICY.format(listen=f"<listen>unix:path={self.address}</listen>"))
        self.proc = spawn(["dbus-daemon", "--config-file", str(conf), "--nofork"], stdout=subprocess.DEVNULL)
        wait_for_socket(self.address, self.proc)
        self.pid = self.proc.pid


class DbusBroker(System):
    """A private dbus-broker: dbus-broker-launch under systemd-socket-activate, with a
    throwaway user bus (dbus-daemon) and a journal datagram socket for the launcher to talk to."""
    key, label, driver, client, server = "dbus-broker", "dbus-broker (sd-bus)", "dbus", "c", "dbus-broker"
    JOURNAL = "/run/systemd/journal/socket"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.user_bus: subprocess.Popen | None = None
        self.journal: socket.socket | None = None
        self.journal_created = False

    def available(self) -> tuple[bool, str]:
        for tool in ("dbus-broker-launch", "dbus-broker", "systemd-socket-activate", "dbus-daemon"):
            if not shutil.which(tool):
                return False, f"{tool} is not installed (apt-get install dbus-broker dbus-daemon systemd)"
        if not self.ctx.has_sdbus:
            return False, "sd-bus headers are not installed (apt-get install libsystemd-dev)"
        if not os.path.exists(self.JOURNAL) and os.geteuid() != 0:
            return False, f"needs {self.JOURNAL} (run as root so the script can provide one)"
        return True, ""

    def _journal(self) -> None:
        if os.path.exists(self.JOURNAL) or self.journal is not None:
            return
        os.makedirs(os.path.dirname(self.JOURNAL), exist_ok=True)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(self.JOURNAL)
        self.journal = s
        self.journal_created = True

        def drain():
            while self.journal is not None:
                try:
                    s.recv(65536)
                except OSError:
                    return
        threading.Thread(target=drain, daemon=True).start()

    def start(self) -> None:
        self._journal()
        tmp = self.ctx.tmp
        user_sock = tmp / "user-bus.sock"
        if self.user_bus is None or self.user_bus.poll() is not None:
            conf = tmp / "user-bus.conf"
            conf.write_text(BUS_POLICY.format(listen=f"<listen>unix:path={user_sock}</listen>"))
            self.user_bus = spawn(["dbus-daemon", "--config-file", str(conf), "--nofork"], stdout=subprocess.DEVNULL)
            wait_for_socket(str(user_sock), self.user_bus)
        self.address = str(tmp / "dbus-broker.sock")
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass
        conf = tmp / "dbus-broker.conf"
        conf.write_text(BUS_POLICY.format(listen=""))
        self.proc = spawn(["systemd-socket-activate", "-l", self.address, "-E", f"XDG_RUNTIME_DIR={tmp}",
                           "-E", f"DBUS_SESSION_BUS_ADDRESS=unix:path={user_sock}",
                           "dbus-broker-launch", "--scope", "user", "--config-file", str(conf)],
                          stdout=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not os.path.exists(self.address):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("systemd-socket-activate did not create the bus socket")
            time.sleep(0.02)
        # The first connection activates the launcher and may hang: warm up with short, bounded attempts.
        for attempt in range(4):
            warm = spawn([str(self.ctx.nbench), "churn", "--system", "dbus", "--address", self.address,
                          "--seconds", "0.05"])
            result, _ = finish(warm, timeout=5)
            if result:
                break
        else:
            raise RuntimeError("dbus-broker did not answer after activation")
        self.pid = self._broker_pid(self.proc.pid)
        if self.pid is None:
            raise RuntimeError("cannot find the dbus-broker process")

    @staticmethod
    def _broker_pid(launcher: int) -> int | None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            ppid = int(text.rsplit(")", 1)[1].split()[1])
            if ppid == launcher and name == "dbus-broker":
                return int(entry)
        return None

    def stop(self) -> None:
        super().stop()

    def shutdown(self) -> None:
        self.stop()
        if self.user_bus is not None:
            stop_gently(self.user_bus)
            self.user_bus = None
        if self.journal is not None:
            s, self.journal = self.journal, None
            s.close()
            if self.journal_created:
                try:
                    os.unlink(self.JOURNAL)
                except OSError:
                    pass


SYSTEM_CLASSES = [Notifyd, NotifydSwift, NotifydLib, Relay, Redis, DbusBroker, DbusDaemon]
ALT_CLASSES = [NotifydAlt, NotifydSwiftAlt]


# ---------------------------------------------------------------- context and settings

class Settings:
    def __init__(self, mode: str):
        self.mode = mode
        full = mode == "full"
        smoke = mode == "smoke"
        self.reps = 3 if full else 1
        # The fan-out configurations the targets are about are repeated more: this machine is shared and noisy.
        self.fanout_reps = 5 if full else 1
        self.seconds = 0.3 if smoke else (1.5 if full else 1.0)
        self.fanout_sizes = [2] if smoke else [1, 4, 16, 64]
        self.repeated_sizes = set() if smoke else {1, 4, 16}
        # Payload rows with a target of their own (issue 13: 16 KiB) are repeated like the sizes above (in a full
        # run: fanout_reps is 1 otherwise).
        self.repeated_payloads = set() if smoke else {16384}
        self.payload_sizes = [] if smoke else [0, 1024, 16384]
        self.payload_fanout = 4
        self.max_posts = 2000 if smoke else 5_000_000
        self.rtt_iterations = 300 if smoke else (20_000 if full else 5_000)
        self.rtt_warmup = 50 if smoke else 2_000
        self.rtt_seconds = 2.0 if smoke else (4.0 if full else 2.0)
        self.rtt_pinned = True  # issue 13's round-trip target is on pinned runs (``rtt_pinning``)
        self.names = 1_000 if smoke else (100_000 if full else 20_000)
        self.name_procs = 2 if smoke else 4
        self.patterns = [0, 100] if smoke else ([0, 1_000, 100_000] if full else [0, 1_000, 20_000])
        self.idle_connections = 50 if smoke else (10_000 if full else 2_000)
        self.idle_procs = 1 if smoke else 2
        self.subs_per_conn = 10
        self.churn_seconds = 0.3 if smoke else (2.0 if full else 1.0)
        self.stopped_seconds = 0.5 if smoke else (3.0 if full else 1.5)
        self.inproc_posts = 20_000 if smoke else 2_000_000
        self.alloc_iterations = 2_000 if smoke else 50_000
        # Unthrottled (issue 13): a poster with no window. Counts, not times: a run posts this many notifications
        # (the issue's cliffs showed at 3,000,000 posts with S = 1 and 300,000 with S = 16), bounded in time.
        quick = mode == "quick"
        self.flood_reps = 1 if smoke else (3 if quick else 10)
        self.flood_sizes = [2] if smoke else [1, 4, 16]
        self.flood_posts = ({2: 5_000} if smoke else
                            {1: 1_000_000, 4: 400_000, 16: 120_000} if quick else
                            {1: 3_000_000, 4: 1_000_000, 16: 300_000})
        self.flood_policies = ["queue:unbounded", "queue:1000", "coalesce"]
        self.flood_max_seconds = 3.0 if smoke else (8.0 if quick else 15.0)  # posting
        self.flood_drain_seconds = 10.0 if smoke else (20.0 if quick else 40.0)  # after the last post
        self.flood_quiet_seconds = 1.0 if smoke else 2.0  # nothing arrived for this long: the run is over
        self.flood_stopped_reps = 1 if smoke else (2 if quick else 5)
        self.flood_stopped_posts = 5_000 if smoke else (400_000 if quick else 1_000_000)
        self.flood_stopped_readers = 3
        self.flood_victim_policy = "queue:100000"
        # The held path alone: one SIGSTOPped subscriber and no reader, so every post is held (daemon CPU per post).
        self.held_reps = 1 if smoke else (2 if quick else 5)
        self.held_posts = 5_000 if smoke else (1_000_000 if quick else 2_000_000)
        self.held_policies = ["queue:unbounded", "queue:100000", "queue:1000", "coalesce"]
        # Issue 15 item 3: another uid's slow subscriber and flood against one user's round trip.
        self.hostile_reps = 1 if smoke else (2 if quick else 5)
        self.hostile_seconds = 1.0 if smoke else 3.0
        self.hostile_iterations = 300 if smoke else 20_000
        self.hostile_posts = 20_000 if smoke else 50_000_000


def window_for(payload: int) -> int:
    """Notifications in flight per subscriber: 1,000, fewer for large payloads (at most ~2 MiB in flight)."""
    return max(16, min(1000, (2 << 20) // (payload + 64)))


class Context:
    def __init__(self, args):
        self.args = args
        self.profile_subscribers = getattr(args, "profile_subscribers", 16)
        self.tmp = Path(tempfile.mkdtemp(prefix="notifyd-bench-"))
        self.settings = Settings(args.mode)
        self.settings.rtt_pinned = not getattr(args, "rtt_unpinned", False)
        self.scratch = ROOT / args.scratch_path
        # The benchmark package (Benchmarks/Package.swift: notify-bench) builds in a scratch path of its own, inside
        # the root's by default (.build/benchmarks, .build-bench/benchmarks), as the C side does (bench-c).
        self.bench_scratch = ROOT / args.bench_scratch_path if args.bench_scratch_path else self.scratch / "benchmarks"
        self.config = args.config
        self.cbuild = self.scratch / "bench-c"
        self.nbench = self.cbuild / "nbench"
        self.relay = self.cbuild / "relay"
        self.malloccount = self.cbuild / "libmalloccount.so"
        self.vectors = self.cbuild / "vectors"
        self.libnotifyd_built = False
        self.bin = None        # the root package's: notifyd, notify-alloc-bench
        self.bench_bin = None  # the benchmark package's: notify-bench
        self.notifyd = None
        self.swift_bench = None
        self.alloc_bench = None
        self.has_hiredis = False
        self.has_sdbus = False
        self.alt_bin = Path(args.alt_bin).resolve() if args.alt_bin else None
        # notify-bench of the other build: --alt-bench-bin, or beside its notifyd (builds from before the benchmark
        # package had its own Package.swift).
        self.alt_bench_bin = (Path(args.alt_bench_bin).resolve() if args.alt_bench_bin else self.alt_bin)


def build(ctx: Context) -> None:
    log("building the C drivers, relay and allocation counter")
    # libnotifyd first, so nbench can drive notifyd through it too (--system libnotifyd).
    ctx.libnotifyd_built = subprocess.run(["make", "-s", "-C", str(ROOT / "libnotifyd")]).returncode == 0
    libnotifyd = [f"LIBNOTIFYD={ROOT / 'libnotifyd'}"] if ctx.libnotifyd_built else []
    subprocess.run(["make", "-s", "-C", str(BENCH / "C"), f"OUT={ctx.cbuild}", *libnotifyd], check=True)
    linked = subprocess.run(["ldd", str(ctx.nbench)], capture_output=True, text=True).stdout
    ctx.has_hiredis = "libhiredis" in linked
    ctx.has_sdbus = "libsystemd" in linked
    # The root package: the daemon and the allocation counts of NotifyWire (a root target: only the root package
    # can import NotifyWire). The benchmark package: notify-bench, on the Notify product; it builds the library in
    # its own scratch path, never notifyd.
    packages = [
        (["swift", "build", "-c", ctx.config, "--scratch-path", str(ctx.scratch)], ("notifyd", "notify-alloc-bench")),
        (["swift", "build", "-c", ctx.config, "--package-path", str(BENCH), "--scratch-path", str(ctx.bench_scratch)],
         ("notify-bench",)),
    ]
    bins = []
    for cmd, products in packages:
        if not ctx.args.no_swift_build:
            for product in products:
                log(" ".join(cmd) + f" --product {product}")
                for attempt in range(2):  # others may be editing Sources/ while we build
                    r = subprocess.run(cmd + ["--product", product], cwd=ROOT)
                    if r.returncode == 0:
                        break
                else:
                    raise SystemExit(f"swift build of {product} failed")
        scratch = Path(cmd[cmd.index("--scratch-path") + 1])
        if ctx.args.no_swift_build and (scratch / ctx.config).is_dir():
            bins.append((scratch / ctx.config).resolve())  # SwiftPM's CONFIG -> TRIPLE/CONFIG link; no lock needed
        else:
            bins.append(Path(subprocess.run(cmd + ["--show-bin-path"], cwd=ROOT, capture_output=True, text=True,
                                            check=True).stdout.strip()))
    ctx.bin, ctx.bench_bin = bins
    ctx.notifyd = ctx.bin / "notifyd"
    ctx.alloc_bench = ctx.bin / "notify-alloc-bench"
    ctx.swift_bench = ctx.bench_bin / "notify-bench"
    for path in (ctx.notifyd, ctx.swift_bench, ctx.alloc_bench):
        if not path.exists():
            raise SystemExit(f"missing {path}: build it first (without --no-swift-build, run.py builds it)")


# ---------------------------------------------------------------- scenarios

def server_delta(system: System, before: float) -> float:
    return cpu_seconds(system.pid) - before


def run_fanout(ctx: Context, system: System, subscribers: int, payload: int, *, stopped: bool = False,
               window: int | None = None, name: str = "bench.fan", pub_system: System | None = None,
               sub_args: tuple = (), seconds: float | None = None, pub_env: dict | None = None,
               sub_env: dict | None = None, before_pub=None, posts: int | None = None) -> dict:
    """Fan-out: `subscribers` processes subscribe to one name, one poster posts with flow control. With `stopped`,
    one more subscriber is SIGSTOPped before posting starts and left out of the flow control."""
    s = ctx.settings
    total = subscribers + (1 if stopped else 0)
    board = Board(ctx.tmp, total, "fan")
    window = window or window_for(payload)
    subs = []
    try:
        for k in range(total):
            subs.append(spawn(system.client_cmd("sub", "--board", str(board.path), "--slot", str(k),
                                                "--slots", str(total), "--name", name, *sub_args), env=sub_env))
        board.wait_ready(range(total), subs)
        victim = subs[-1] if stopped else None
        extra = {}
        if victim is not None:
            os.kill(victim.pid, signal.SIGSTOP)
            reset_peak_rss(system.pid)
            extra["rss_before_kib"] = memory_kib(system.pid).get("VmRSS")
        if before_pub:
            before_pub()
        poster = pub_system or system
        cpu0 = cpu_seconds(system.pid)
        pub = spawn(poster.client_cmd("pub", "--board", str(board.path), "--subs", str(total), "--name", name,
                                      "--posts", str(posts or s.max_posts), "--payload", str(payload), "--window", str(window),
                                      "--max-seconds", str(seconds or s.seconds),
                                      *(["--ignore-slot", str(total - 1)] if stopped else [])), env=pub_env)
        result, err = finish(pub, timeout=(seconds or s.seconds) + 90)
        cpu = server_delta(system, cpu0)
        if victim is not None:
            mem = memory_kib(system.pid)
            extra["peak_rss_kib"] = mem.get("VmHWM")
            extra["rss_after_kib"] = mem.get("VmRSS")
            os.kill(victim.pid, signal.SIGCONT)
        if result is None:
            raise RuntimeError(f"poster failed: {err[-600:]}")
        board.stop()
        sub_results = []
        for p in subs:
            r, e = finish(p, timeout=20)
            sub_results.append(r or {"error": e[-300:]})
        result.update(extra)
        result["server_cpu_s"] = round(cpu, 3)
        if result.get("delivered"):
            result["server_cpu_us_per_delivery"] = round(cpu * 1e6 / result["delivered"], 4)
        if victim is not None:
            result["stopped_subscriber"] = sub_results[-1]
        allocs = [r.get("allocs_per_note") for r in sub_results if isinstance(r, dict) and r.get("allocs_per_note") is not None]
        if allocs:
            result["sub_allocs_per_note"] = statistics.median(allocs)
        return result
    finally:
        board.stop()
        for p in subs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for p in subs:
            if p in children:
                finish(p, timeout=10)
        board.close()


# ---------------------------------------------------------------- unthrottled (issue 13)

FLOOD_KEEP = ("delivered_per_s", "server_cpu_us_per_delivery", "server_cpu_us_per_note", "delivered", "merged_frames",
              "merged", "dropped", "unaccounted", "errors", "posted", "expected", "seconds", "posting_seconds",
              "posts_per_s", "max_lag", "complete", "quiet_end", "drain_cut", "posting_cut", "min_per_subscriber",
              "max_per_subscriber", "server_cpu_s", "peak_rss_kib", "rss_before_kib", "rss_after_kib")


def flood_policy_args(system: System, policy: str | None) -> tuple:
    """Only notifyd has delivery policies; the relay and Redis do what they do natively."""
    return ("--policy", policy) if policy and system.server.startswith("notifyd") else ()


def run_flood(ctx: Context, system: System, subscribers: int, posts: int, policy: str | None, *, payload: int = 64,
              victim_policy: str | None = None, name: str = "bench.flood") -> dict:
    """One unthrottled run: `subscribers` processes read as fast as they can while the flood poster writes with no
    window. With `victim_policy`, one more subscriber (that policy) is SIGSTOPped before posting starts and left
    out of the counts. The daemon's CPU time is read from /proc before the poster starts and after it ends."""
    s = ctx.settings
    stopped = victim_policy is not None
    total = subscribers + (1 if stopped else 0)
    board = Board(ctx.tmp, total, "flood")
    subs = []
    try:
        for k in range(total):
            pol = victim_policy if (stopped and k == total - 1) else policy
            subs.append(spawn(system.client_cmd("sub", "--board", str(board.path), "--slot", str(k), "--slots",
                                                str(total), "--name", name, *flood_policy_args(system, pol))))
        board.wait_ready(range(total), subs)
        victim = subs[-1] if stopped else None
        if victim is not None:
            os.kill(victim.pid, signal.SIGSTOP)
        reset_peak_rss(system.pid)
        rss_before = memory_kib(system.pid).get("VmRSS")
        cpu0 = cpu_seconds(system.pid)
        flood = spawn(system.client_cmd("flood", "--board", str(board.path), "--subs", str(total), "--name", name,
                                        "--posts", str(posts), "--payload", str(payload),
                                        "--max-seconds", str(s.flood_max_seconds),
                                        "--drain-seconds", str(s.flood_drain_seconds),
                                        "--quiet-seconds", str(s.flood_quiet_seconds),
                                        *flood_policy_args(system, policy),
                                        *(["--ignore-slot", str(total - 1)] if stopped else [])))
        result, err = finish(flood, timeout=s.flood_max_seconds + s.flood_drain_seconds + 120)
        cpu = server_delta(system, cpu0)
        mem = memory_kib(system.pid)
        if victim is not None:
            os.kill(victim.pid, signal.SIGCONT)
        if result is None:
            raise RuntimeError(f"flood poster failed: {err[-600:]}")
        board.stop()
        sub_results = []
        for p in subs:
            r, e = finish(p, timeout=20)
            sub_results.append(r or {"error": e[-300:]})
        result["server_cpu_s"] = round(cpu, 4)
        result["rss_before_kib"] = rss_before
        result["peak_rss_kib"] = mem.get("VmHWM")
        result["rss_after_kib"] = mem.get("VmRSS")
        if result.get("delivered"):
            result["server_cpu_us_per_delivery"] = round(cpu * 1e6 / result["delivered"], 4)
            # A NOTIFICATION_MERGED frame delivers 1 + merged_count posts' worth of news.
            result["server_cpu_us_per_note"] = round(cpu * 1e6 / (result["delivered"] + result.get("merged", 0)), 4)
        errors = [r.get("error") for r in sub_results[:subscribers] if r.get("error")]
        if errors:
            result["subscriber_errors"] = errors[:3]
        if victim is not None:
            result["stopped_subscriber"] = sub_results[-1]
        return result
    finally:
        board.stop()
        for p in subs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for p in subs:
            if p in children:
                finish(p, timeout=10)
        board.close()


def spread(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def summarize_flood(runs: list[dict], **keys) -> dict:
    ok = [r for r in runs if "error" not in r]
    entry = dict(keys)
    entry["runs"] = len(runs)
    entry["failed_runs"] = len(runs) - len(ok)
    if len(ok) < len(runs):
        entry["errors"] = [r["error"][:300] for r in runs if "error" in r][:3]
    if not ok:
        entry["error"] = entry.get("errors", ["no run succeeded"])[0]
        return entry
    entry["delivered_per_s"] = spread([r.get("delivered_per_s") for r in ok])
    entry["server_cpu_us_per_delivery"] = spread([r.get("server_cpu_us_per_delivery") for r in ok])
    entry["server_cpu_us_per_note"] = spread([r.get("server_cpu_us_per_note") for r in ok])
    for key in ("delivered", "merged_frames", "merged", "dropped", "unaccounted", "posted", "expected", "max_lag",
                "seconds", "posts_per_s"):
        values = [r.get(key) for r in ok if r.get(key) is not None]
        if values:
            entry[key + "_median"] = statistics.median(values)
    entry["complete_runs"] = sum(1 for r in ok if r.get("complete"))
    entry["cut_runs"] = sum(1 for r in ok if r.get("drain_cut") or r.get("posting_cut"))
    entry["subscriber_error_runs"] = sum(1 for r in ok if r.get("subscriber_errors") or r.get("errors"))
    sub_errors = [e for r in ok for e in r.get("subscriber_errors", [])]
    if sub_errors:
        entry["subscriber_error_sample"] = sub_errors[0][:200]
    entry["run_list"] = [{k: r.get(k) for k in FLOOD_KEEP if r.get(k) is not None} if "error" not in r
                         else {"error": r["error"][:300]} for r in runs]
    return entry


def scenario_unthrottled(ctx: Context, systems: list[System], results: dict) -> None:
    """Issue 13: the poster writes with no window. Per S: notifyd under each policy, the C relay and Redis (their
    native behaviour), and notifyd with the throttled poster (window 1,000: nothing is held; the direct path's
    CPU per delivery). Repeated `flood_reps` times, interleaved, so drift hits every configuration alike; the
    minimum, median and maximum of each configuration are reported: a cliff shows as a minimum far below the
    median."""
    s = ctx.settings
    nd = next((x for x in systems if x.key == "notifyd-c"), None)
    # The other build (--alt-bin) runs every notifyd configuration too, for before/after comparisons.
    builds = [x for x in systems if x.key in ("notifyd-c", "notifyd-c-alt")]
    peers = [x for x in systems if x.key in ("relay", "redis")]
    configs = []  # (label key, system, policy or None, throttled)
    for n in s.flood_sizes:
        for build in builds:
            configs.append((n, build, "direct", True))
            for policy in s.flood_policies:
                configs.append((n, build, policy, False))
        for peer in peers:
            configs.append((n, peer, None, False))
    runs: dict[tuple, list] = {(n, sys_.key, pol): [] for n, sys_, pol, _ in configs}
    for system in builds + peers:  # fresh instances: nothing left over from earlier scenarios
        system.restart()
    for rep in range(s.flood_reps):
        for n, system, policy, throttled in configs:
            posts = s.flood_posts[n]
            log(f"unthrottled S={n} {system.key} {policy or 'native'} (run {rep + 1}/{s.flood_reps})")
            try:
                if throttled:
                    r = run_fanout(ctx, system, n, 64, posts=posts, seconds=s.flood_max_seconds,
                                   sub_args=("--policy", "queue:unbounded"), name="bench.flood")
                else:
                    r = run_flood(ctx, system, n, posts, policy)
            except Exception as e:  # noqa: BLE001 - one failure must not end the run
                r = {"error": str(e)[-500:]}
            if "error" not in r and throttled and r.get("delivered"):
                r["server_cpu_us_per_note"] = r.get("server_cpu_us_per_delivery")
            runs[(n, system.key, policy)].append(r)
    out = []
    for n, system, policy, throttled in configs:
        entry = summarize_flood(runs[(n, system.key, policy)], system=system.key, subscribers=n, payload=64,
                                policy=policy or "native", mode="throttled" if throttled else "unthrottled",
                                posts=s.flood_posts[n])
        out.append(entry)
    results["unthrottled"] = out
    if nd is not None:
        scenario_held_path(ctx, nd, results)


def scenario_held_path(ctx: Context, nd: System, results: dict) -> None:
    """The held path alone: one subscriber under each policy, SIGSTOPped after subscribing, and no reader, so the
    daemon holds every post (after the first ≈ 8 MiB, which it queues) and, past each policy's limit, merges or
    drops. Daemon CPU per post, to compare with the direct path's CPU per delivery at S = 1 (both one decode and
    one delivery or hold per post)."""
    s = ctx.settings
    runs: dict[str, list] = {p: [] for p in s.held_policies}
    for rep in range(s.held_reps):
        for policy in s.held_policies:
            log(f"held path: one stopped {policy} subscriber (run {rep + 1}/{s.held_reps})")
            try:
                r = run_flood(ctx, nd, 0, s.held_posts, None, victim_policy=policy)
                r["server_cpu_us_per_post"] = round(r["server_cpu_s"] * 1e6 / max(r["posted"], 1), 4)
                victim = r.get("stopped_subscriber") or {}
                if victim.get("error"):
                    r["error"] = f"stopped subscriber: {victim['error']}"
            except Exception as e:  # noqa: BLE001
                r = {"error": str(e)[-500:]}
            runs[policy].append(r)
    out = []
    for policy in s.held_policies:
        ok = [r for r in runs[policy] if "error" not in r]
        entry = {"system": nd.key, "policy": policy, "posts": s.held_posts, "runs": len(runs[policy]),
                 "failed_runs": len(runs[policy]) - len(ok),
                 "server_cpu_us_per_post": spread([r.get("server_cpu_us_per_post") for r in ok]),
                 "posts_per_s": spread([r.get("posts_per_s") for r in ok]),
                 "rss_growth_kib": spread([r["peak_rss_kib"] - r["rss_before_kib"] for r in ok
                                           if r.get("peak_rss_kib") and r.get("rss_before_kib")])}
        if not ok:
            entry["error"] = (runs[policy][0].get("error") if runs[policy] else "no run") or "no run succeeded"
        out.append(entry)
    results["unthrottled_held"] = out


def scenario_unthrottled_stopped(ctx: Context, systems: list[System], results: dict) -> None:
    """Issue 13: 3 reading subscribers (queue(unbounded) on notifyd) under the unthrottled poster, with and
    without one more subscriber (queue(100000) on notifyd) that is SIGSTOPped after subscribing; alternating
    runs on one fresh instance. The daemon's peak RSS (VmHWM, reset before each run) is recorded."""
    s = ctx.settings
    out = []
    readers = s.flood_stopped_readers
    for system in systems:
        if system.key not in ("notifyd-c", "relay", "redis"):
            continue
        log(f"unthrottled with a SIGSTOPped subscriber ({readers} + 1 stopped) {system.key}")
        plain_runs, stopped_runs = [], []
        try:
            system.restart()
            base_rss = memory_kib(system.pid).get("VmRSS")
            for rep in range(s.flood_stopped_reps):
                for stopped in (False, True):
                    try:
                        r = run_flood(ctx, system, readers, s.flood_stopped_posts, "queue:unbounded",
                                      victim_policy=s.flood_victim_policy if stopped else None)
                    except Exception as e:  # noqa: BLE001
                        r = {"error": str(e)[-500:]}
                    (stopped_runs if stopped else plain_runs).append(r)
            entry = {"system": system.key, "readers": readers, "posts": s.flood_stopped_posts,
                     "victim_policy": s.flood_victim_policy if system.server.startswith("notifyd") else "native",
                     "reader_policy": "queue:unbounded" if system.server.startswith("notifyd") else "native",
                     "rss_at_start_kib": base_rss}
            plain = summarize_flood(plain_runs)
            stop = summarize_flood(stopped_runs)
            entry["plain"] = plain
            entry["stopped"] = stop
            if plain.get("delivered_per_s") and stop.get("delivered_per_s"):
                entry["ratio_median"] = stop["delivered_per_s"]["median"] / plain["delivered_per_s"]["median"]
                pairs = [(a.get("delivered_per_s"), b.get("delivered_per_s")) for a, b in zip(plain_runs, stopped_runs)]
                entry["ratio_pairs"] = [round(b / a, 3) for a, b in pairs if a and b]
            peaks = [r.get("peak_rss_kib") for r in stopped_runs if r.get("peak_rss_kib")]
            if peaks:
                entry["peak_rss_kib"] = max(peaks)
                entry["growth_kib"] = max(r["peak_rss_kib"] - r["rss_before_kib"] for r in stopped_runs
                                          if r.get("peak_rss_kib") and r.get("rss_before_kib"))
            plain_peaks = [r.get("peak_rss_kib") for r in plain_runs if r.get("peak_rss_kib")]
            if plain_peaks:
                entry["plain_peak_rss_kib"] = max(plain_peaks)
            victims = [r.get("stopped_subscriber") or {} for r in stopped_runs if "error" not in r]
            if victims:
                entry["victim_sample"] = victims[-1]
            out.append(entry)
        except Exception as e:  # noqa: BLE001
            out.append({"system": system.key, "error": str(e)[-500:]})
    results["unthrottled_stopped"] = out


ATTACKER_UID = 65534


def run_hostile(ctx: Context, system: System, attack: str | None, target: System | None = None) -> dict:
    """One run of a "victim" user (this process's uid) while uid 65534 attacks: its round trips, then its fan-out
    throughput (4 subscribers, 64 B, the throttled poster of scenario 1). `flood` holds a SIGSTOPped
    queue(100000) subscriber and floods its name with 16-byte posts from an unthrottled poster; `quotas` first
    takes every per-user quota (Benchmarks/quota_attacker.py), then floods likewise. The attack goes to `target`
    (default: the victim's daemon); another daemon there leaves only the machine's share."""
    attacked = attack is not None
    target = target or system
    s = ctx.settings
    board = Board(ctx.tmp, 2, "hostile-rtt")
    attack_board = Board(ctx.tmp, 1, "hostile-flood")
    procs: list[subprocess.Popen] = []
    as_attacker = ["setpriv", f"--reuid={ATTACKER_UID}", f"--regid={ATTACKER_UID}", "--clear-groups", "--"]
    try:
        flood = victim = None
        if attack == "quotas":
            hog = spawn(as_attacker + ["/usr/bin/python3", str(ROOT / "Benchmarks" / "quota_attacker.py"), target.address, "2"])
            procs.append(hog)
            line = hog.stdout.readline() if hog.stdout else b""
            if not line:
                raise RuntimeError("the quota attacker ended early: " + finish(hog, 5)[1][-300:])
            quotas_taken = json.loads(line)
        if attacked:
            os.chmod(attack_board.path, 0o666)
            victim = spawn(as_attacker + target.c_cmd("sub", "--board", str(attack_board.path), "--slot", "0",
                                                      "--slots", "1", "--name", "hostile.flood",
                                                      "--policy", "queue:100000"))
            procs.append(victim)
            attack_board.wait_ready(range(1), [victim])
            os.kill(victim.pid, signal.SIGSTOP)
            flood = spawn(as_attacker + target.c_cmd("flood", "--board", str(attack_board.path), "--subs", "1",
                                                     "--name", "hostile.flood", "--posts", str(s.hostile_posts),
                                                     "--payload", "16", "--max-seconds", str(2 * s.hostile_seconds + 4),
                                                     "--drain-seconds", "0.1", "--quiet-seconds", "0.1",
                                                     "--ignore-slot", "0"))
            procs.append(flood)
            time.sleep(0.3)  # the poster is connected and writing; the victim's backlog is being held
        pong = spawn(system.c_cmd("pong", "--board", str(board.path), "--slot", "1", "--slots", "2"))
        procs.append(pong)
        ping = spawn(system.c_cmd("ping", "--board", str(board.path), "--slot", "0", "--slots", "2",
                                  "--iterations", str(s.hostile_iterations), "--warmup", "200", "--payload", "64",
                                  "--max-seconds", str(s.hostile_seconds)))
        result, err = finish(ping, timeout=s.hostile_seconds + 60)
        board.stop()
        finish(pong, timeout=10)
        if result is None:
            raise RuntimeError(err[-500:])
        fan = run_fanout(ctx, system, 4, 64, name="victim.fan", seconds=s.hostile_seconds)
        result["fanout_delivered_per_s"] = fan.get("delivered_per_s")
        if flood is not None:
            result["attack_still_posting"] = flood.poll() is None
        if attack == "quotas":
            result["quotas_taken"] = quotas_taken
        return result
    finally:
        board.stop()
        attack_board.stop()
        for p in procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
            finish(p, timeout=10)
        board.close()
        attack_board.close()


def scenario_hostile(ctx: Context, systems: list[System], results: dict) -> None:
    """Issue 15 item 3: one user's round trip and fan-out throughput through notifyd, idle and while another uid
    (65534) runs a SIGSTOPped queue(100000) subscriber plus an unthrottled poster of 16-byte notifications to its
    name; alternating runs on one fresh instance. Needs root (setpriv); the socket directory is opened to the attacker."""
    s = ctx.settings
    system = next((x for x in systems if x.key == "notifyd-c"), None)
    if system is None:
        return
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        results["hostile"] = {"skipped": "needs root and setpriv to run the attacker as uid 65534"}
        return
    log("hostile user: round trips idle, under another uid's slow-subscriber flood, and with every quota taken too")
    os.chmod(ctx.tmp, 0o711)
    # "elsewhere" is the control: the same attack on a second daemon, so the victim's daemon does none of its
    # work and what is left is the machine's share (2 cores: the flood poster and a daemon busy with it).
    # With --alt-bin, the other build is measured idle and attacked in the same rounds (before/after).
    alt = next((x for x in systems if x.key == "notifyd-c-alt"), None)
    modes = [("idle", None), ("attacked", "flood"), ("quotas", "quotas"), ("elsewhere", "flood")]
    if alt is not None:
        modes += [("idle_alt", None), ("attacked_alt", "flood")]
    runs_by_mode: dict[str, list] = {mode: [] for mode, _ in modes}
    other = NotifydElsewhere(ctx)
    try:
        for rep in range(s.hostile_reps):
            for mode, attack in modes:
                victim = alt if mode.endswith("_alt") else system
                victim.restart()  # every run on a fresh instance: an attack leaves its quotas behind
                try:
                    if mode == "elsewhere":
                        other.restart()
                    r = run_hostile(ctx, victim, attack, other if mode == "elsewhere" else None)
                except Exception as e:  # noqa: BLE001
                    r = {"error": str(e)[-500:]}
                finally:
                    other.stop()
                runs_by_mode[mode].append(r)
    except Exception as e:  # noqa: BLE001
        results["hostile"] = {"error": str(e)[-500:]}
        return
    entry: dict = {"system": system.key, "attacker_uid": ATTACKER_UID, "posts": s.hostile_posts, "payload": 16}
    quotas = [r.get("quotas_taken") for r in runs_by_mode["quotas"] if r.get("quotas_taken")]
    if quotas:
        entry["quotas_taken"] = quotas[-1]
    for label_, runs in runs_by_mode.items():
        ok = [r for r in runs if "error" not in r]
        entry[label_] = {"runs": len(ok), "failed_runs": len(runs) - len(ok),
                         "errors": [r["error"][-300:] for r in runs if "error" in r][:2]}
        for key in ("p50_us", "p99_us", "p999_us", "max_us", "fanout_delivered_per_s"):
            if ok and all(r.get(key) is not None for r in ok):
                entry[label_][key] = statistics.median(r[key] for r in ok)
        if label_ != "idle":
            entry[label_]["attack_outlasted_runs"] = sum(1 for r in ok if r.get("attack_still_posting"))
    results["hostile"] = entry


def median_run(runs: list[dict], key: str) -> dict:
    ok = [r for r in runs if r.get(key) is not None]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: r[key])
    best = dict(ok[len(ok) // 2])
    best["runs"] = [round(r[key], 1) for r in runs if r.get(key) is not None]
    return best


def scenario_fanout(ctx: Context, systems: list[System], results: dict) -> None:
    s = ctx.settings
    configs = [(n, 64) for n in s.fanout_sizes] + [(s.payload_fanout, p) for p in s.payload_sizes]
    out = []
    for subscribers, payload in configs:
        repeated = (subscribers in s.repeated_sizes and payload == 64) or payload in s.repeated_payloads
        reps = s.fanout_reps if repeated else 1
        runs: dict[str, list] = {sys_.key: [] for sys_ in systems}
        for rep in range(reps):
            for system in systems:  # interleaved, so drift hits every system alike
                log(f"fan-out S={subscribers} payload={payload} {system.key} (run {rep + 1}/{reps})")
                try:
                    runs[system.key].append(run_fanout(ctx, system, subscribers, payload))
                except Exception as e:  # noqa: BLE001 - one failure must not end the run
                    runs[system.key].append({"error": str(e)[-500:]})
        for system in systems:
            entry = median_run(runs[system.key], "delivered_per_s")
            entry.update({"system": system.key, "subscribers": subscribers, "payload": payload})
            out.append(entry)
    results["fanout"] = out


def rtt_pinning(ctx: Context) -> tuple[set[int], set[int]] | None:
    """The CPUs of a pinned round trip: the server alone on one, both clients on the others (`None`: unpinned,
    asked for or impossible). Unpinned, where the scheduler places three processes on two CPUs moves a p50 by
    ± 20% on these VMs (F14); pinned, every system's messages take the same path between CPUs."""
    if not ctx.settings.rtt_pinned or not shutil.which("taskset"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def set_process_affinity(pid: int, cpus: set[int]) -> None:
    """Pins every thread `pid` has now (threads it starts later inherit their creator's CPUs)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # a thread that ended meanwhile


def pinned(cmd: list[str], cpus: set[int] | None) -> list[str]:
    return cmd if cpus is None else ["taskset", "-c", ",".join(map(str, sorted(cpus))), *cmd]


def scenario_rtt(ctx: Context, systems: list[System], results: dict) -> None:
    """Round trips in `reps` interleaved runs per system (a burst of load from elsewhere on the machine then hits
    one run of every system rather than all runs of one); each percentile is the median over the runs. Pinned
    unless `--rtt-unpinned`: the server on one CPU, the two clients on the others (``rtt_pinning``)."""
    s = ctx.settings
    runs: dict[str, list] = {system.key: [] for system in systems}
    errors: dict[str, str] = {}
    iterations = max(100, s.rtt_iterations // s.reps)
    pinning = rtt_pinning(ctx)
    server_cpus, client_cpus = pinning if pinning else (None, None)
    everywhere = os.sched_getaffinity(0)
    for rep_index in range(s.reps):
        for system in systems:
            log(f"round trip {system.key} (run {rep_index + 1}/{s.reps})" + (" pinned" if pinning else ""))
            board = Board(ctx.tmp, 2, "rtt")
            try:
                if server_cpus is not None and system.pid is not None:
                    set_process_affinity(system.pid, server_cpus)
                pong = spawn(pinned(system.client_cmd("pong", "--board", str(board.path), "--slot", "1", "--slots", "2"),
                                    client_cpus))
                ping = spawn(pinned(system.client_cmd("ping", "--board", str(board.path), "--slot", "0", "--slots", "2",
                                                      "--iterations", str(iterations), "--warmup", str(s.rtt_warmup),
                                                      "--payload", "64", "--max-seconds", str(s.rtt_seconds)),
                                    client_cpus))
                result, err = finish(ping, timeout=s.rtt_seconds + 120)
                board.stop()
                finish(pong, timeout=10)
                if result is None:
                    raise RuntimeError(err[-500:])
                runs[system.key].append(result)
            except Exception as e:  # noqa: BLE001
                errors[system.key] = str(e)[-500:]
            finally:
                if server_cpus is not None and system.pid is not None:
                    try:
                        set_process_affinity(system.pid, everywhere)  # the next scenarios run unpinned
                    except FileNotFoundError:
                        pass
                board.stop()
                board.close()
    out = []
    for system in systems:
        ok = runs[system.key]
        if not ok:
            out.append({"system": system.key, "error": errors.get(system.key, "no run succeeded")})
            continue
        entry = {"system": system.key, "payload": 64, "runs": len(ok), "samples": sum(r["samples"] for r in ok),
                 "pinned": None if pinning is None else {"server_cpus": sorted(server_cpus),
                                                         "client_cpus": sorted(client_cpus)}}
        for key in ("p50_us", "p99_us", "p999_us", "max_us", "mean_us"):
            entry[key] = statistics.median(r[key] for r in ok)
            entry[key + "_runs"] = [r[key] for r in ok]
        out.append(entry)
    results["rtt"] = out


def scenario_names(ctx: Context, systems: list[System], results: dict) -> None:
    s = ctx.settings
    taking = [system for system in systems if system.client != "swift"]  # the library adds nothing to a name table
    runs: dict[str, list] = {system.key: [] for system in taking}
    for rep in range(s.reps):
        for system in taking:  # interleaved, so drift hits every system alike; the median run is reported
            log(f"many names ({s.names}) {system.key} (run {rep + 1}/{s.reps})")
            runs[system.key].append(run_names(ctx, system))
    out = []
    for system in taking:
        entry = median_run(runs[system.key], "delivered_per_s")
        cpu = [r["server_cpu_us_per_delivery"] for r in runs[system.key] if r.get("server_cpu_us_per_delivery")]
        if cpu:
            entry["server_cpu_us_per_delivery_runs"] = cpu
        # A failed or incomplete run is said in the table, not hidden behind the median of the others.
        entry["failed_runs"] = sum(1 for r in runs[system.key] if r.get("delivered_per_s") is None)
        entry["incomplete_runs"] = sum(1 for r in runs[system.key] if r.get("delivered_per_s") is not None
                                       and not r.get("complete"))
        out.append(entry)
    results["names"] = out


def run_names(ctx: Context, system: System) -> dict:
    """One run of scenario 3 against a fresh `system`: its subscribers take every name, then one poster spreads."""
    s = ctx.settings
    board = None
    procs = []
    try:
        system.restart()
        board = Board(ctx.tmp, s.name_procs, "names")
        per = s.names // s.name_procs
        t0 = time.time()
        for k in range(s.name_procs):
            procs.append(spawn(system.client_cmd(
                "sub", "--board", str(board.path), "--slot", str(k), "--slots", str(s.name_procs),
                "--name-prefix", "bench.names.n", "--name-count", str(s.names),
                "--name-first", str(k * per), "--name-last", str(s.names if k == s.name_procs - 1 else (k + 1) * per))))
        board.wait_ready(range(s.name_procs), procs, timeout=600)
        subscribe_s = time.time() - t0
        rss = memory_kib(system.pid).get("VmRSS")
        cpu0 = cpu_seconds(system.pid)
        pub = spawn(system.client_cmd("pub", "--board", str(board.path), "--subs", str(s.name_procs), "--spread",
                                      "--name-prefix", "bench.names.n", "--name-count", str(s.names),
                                      "--posts", str(s.max_posts), "--payload", "64", "--window", "1000",
                                      "--max-seconds", str(s.seconds)))
        result, err = finish(pub, timeout=s.seconds + 120)
        cpu = server_delta(system, cpu0)
        board.stop()
        for p in procs:
            finish(p, timeout=20)
        if result is None:
            raise RuntimeError(err[-500:])
        result.update({"system": system.key, "names": s.names, "subscribe_seconds": round(subscribe_s, 2),
                       "server_rss_kib": rss, "server_cpu_s": round(cpu, 3)})
        if result.get("delivered"):
            result["server_cpu_us_per_delivery"] = round(cpu * 1e6 / result["delivered"], 4)
        return result
    except Exception as e:  # noqa: BLE001 - one failure must not end the run
        return {"system": system.key, "names": s.names, "error": str(e)[-500:]}
    finally:
        if board is not None:
            board.stop()
        for p in procs:
            if p in children:
                finish(p, timeout=10)
        if board is not None:
            board.close()


def scenario_patterns(ctx: Context, systems: list[System], results: dict) -> None:
    s = ctx.settings
    out = []
    for system in systems:
        if system.client == "swift" or system.key == "relay" or system.driver == "dbus":
            continue  # no wildcard subscriptions (relay, D-Bus match rules) / library adds nothing here
        for count in s.patterns:
            log(f"patterns: {count} non-matching, {system.key}")
            system.restart()
            # Each holder connection stays below notifyd's 65,536 subscriptions per connection.
            holders_needed = max(1, -(-count // 50_000))
            holder_board = Board(ctx.tmp, holders_needed, "pat")
            holders = []
            try:
                if count:
                    per = -(-count // holders_needed)
                    for k in range(holders_needed):
                        n = min(per, count - k * per)
                        holders.append(spawn(system.c_cmd("sub", "--board", str(holder_board.path), "--slot", str(k),
                                                          "--slots", str(holders_needed), "--patterns", str(n),
                                                          "--pattern-first", str(k * per))))
                    holder_board.wait_ready(range(holders_needed), holders, timeout=900)
                runs = []
                for _ in range(s.reps):
                    runs.append(run_fanout(ctx, system, 1, 64, window=200))
                entry = median_run(runs, "delivered_per_s")
                entry.update({"system": system.key, "patterns": count})
                out.append(entry)
            except Exception as e:  # noqa: BLE001
                out.append({"system": system.key, "patterns": count, "error": str(e)[-500:]})
            finally:
                holder_board.stop()
                for holder in holders:
                    finish(holder, timeout=30)
                holder_board.close()
    results["patterns"] = out


def scenario_stopped(ctx: Context, systems: list[System], results: dict) -> None:
    s = ctx.settings
    out = []
    for system in systems:
        log(f"SIGSTOPped subscriber during fan-out (4 + 1 stopped) {system.key}")
        try:
            system.restart()
            # The same fan-out without a stopped subscriber right before and after, on the same instance.
            before = run_fanout(ctx, system, 4, 64, seconds=s.stopped_seconds)
            result = run_fanout(ctx, system, 4, 64, stopped=True, seconds=s.stopped_seconds)
            after = run_fanout(ctx, system, 4, 64, seconds=s.stopped_seconds)
            plain = [r.get("delivered_per_s") for r in (before, after) if r.get("delivered_per_s")]
            result["system"] = system.key
            result["adjacent_plain_per_s"] = plain
            if plain:
                result["ratio_to_adjacent_plain"] = result["delivered_per_s"] / statistics.mean(plain)
            out.append(result)
        except Exception as e:  # noqa: BLE001
            out.append({"system": system.key, "error": str(e)[-500:]})
    results["stopped"] = out


def scenario_connections(ctx: Context, systems: list[System], results: dict) -> None:
    s = ctx.settings
    out = []
    for system in systems:
        if system.client == "swift":
            continue
        log(f"idle connections ({s.idle_connections} x {s.subs_per_conn} subscriptions) {system.key}")
        board = Board(ctx.tmp, s.idle_procs, "idle")
        procs = []
        try:
            system.restart()
            # warm the server up (code paths, allocator) before the baseline
            warm = spawn(system.c_cmd("churn", "--seconds", "0.2"))
            finish(warm, timeout=30)
            time.sleep(0.3)
            rss0 = memory_kib(system.pid)["VmRSS"]
            per = s.idle_connections // s.idle_procs
            t0 = time.time()
            for k in range(s.idle_procs):
                procs.append(spawn(system.c_cmd("idle", "--board", str(board.path), "--slot", str(k), "--slots",
                                                str(s.idle_procs), "--connections", str(per),
                                                "--subs-per-conn", str(s.subs_per_conn),
                                                "--name-prefix", "bench.idle.p")))
            board.wait_ready(range(s.idle_procs), procs, phase=1, timeout=600)
            connect_s = time.time() - t0
            time.sleep(0.5)
            rss1 = memory_kib(system.pid)["VmRSS"]
            opened = sum(board.get(k, 1) for k in range(s.idle_procs))
            t1 = time.time()
            for k in range(s.idle_procs):
                board.set(k, 2, 1)
            board.wait_ready(range(s.idle_procs), procs, phase=2, timeout=600)
            subscribe_s = time.time() - t1
            time.sleep(0.5)
            rss2 = memory_kib(system.pid)["VmRSS"]
            subscribed = sum(board.get(k, 4) for k in range(s.idle_procs))
            board.stop()
            for p in procs:
                finish(p, timeout=60)
            entry = {"system": system.key, "connections_requested": s.idle_connections, "connections": opened,
                     "subscriptions": subscribed, "rss_base_kib": rss0, "rss_connected_kib": rss1,
                     "rss_subscribed_kib": rss2, "connect_seconds": round(connect_s, 2),
                     "subscribe_seconds": round(subscribe_s, 2)}
            if opened:
                entry["bytes_per_connection"] = round((rss1 - rss0) * 1024 / opened)
            if subscribed:
                entry["bytes_per_subscription"] = round((rss2 - rss1) * 1024 / subscribed)
            if opened < s.idle_connections:
                entry["note"] = f"only {opened} of {s.idle_connections} connections were accepted"
            out.append(entry)
        except Exception as e:  # noqa: BLE001
            out.append({"system": system.key, "error": str(e)[-500:]})
        finally:
            board.stop()
            for p in procs:
                if p in children:
                    finish(p, timeout=30)
            board.close()
    # Connect + subscribe + disconnect: interleaved runs, each on a fresh server (tearing down thousands of
    # connections can keep it busy for a while), so drift hits every system alike; the median run is reported.
    churn: dict[str, list] = {}
    failed: dict[str, list] = {}
    for rep in range(s.reps):
        for entry in out:
            system = next(x for x in systems if x.key == entry["system"])
            log(f"  churn {system.key} (run {rep + 1}/{s.reps})")
            try:
                system.restart()
                proc = spawn(system.c_cmd("churn", "--seconds", str(s.churn_seconds)))
                cr, err = finish(proc, timeout=s.churn_seconds + 60)
            except Exception as e:  # noqa: BLE001 - one failure must not end the run
                cr, err = None, str(e)
            if cr is None or cr.get("per_s") is None:
                failed.setdefault(entry["system"], []).append((err or json.dumps(cr))[-300:])
            else:
                churn.setdefault(entry["system"], []).append(cr["per_s"])
    for entry in out:
        each = churn.get(entry["system"], [])
        entry["churn_per_s"] = statistics.median(each) if each else None
        entry["churn_runs"] = each
        entry["churn_failed_runs"] = len(failed.get(entry["system"], []))
        if failed.get(entry["system"]):
            entry["churn_error"] = failed[entry["system"]][-1]
    results["connections"] = out


def scenario_inproc(ctx: Context, notifyd: System | None, results: dict) -> None:
    s = ctx.settings
    out = []
    if notifyd is not None:
        swift = NotifydSwift(ctx)
        swift.address, swift.pid = notifyd.address, notifyd.pid
        for target in ("queue", "immediate"):
            log(f"in-process: daemon -> I/O thread -> handler on {target}")
            try:
                r = run_fanout(ctx, swift, 1, 64, pub_system=notifyd, sub_args=("--target", target))
                r.update({"mode": "daemon", "target": target})
                out.append(r)
            except Exception as e:  # noqa: BLE001
                out.append({"mode": "daemon", "target": target, "error": str(e)[-500:]})
    for target in ("queue", "immediate"):
        log(f"in-process: self. name -> handler on {target}")
        p = spawn([str(ctx.swift_bench), "inproc", "--target", target, "--posts", str(s.inproc_posts),
                   "--max-seconds", str(s.seconds), "--address", str(ctx.tmp / "none.sock")])
        r, err = finish(p, timeout=s.seconds + 60)
        entry = r or {"error": err[-500:]}
        entry.update({"mode": "self", "target": target})
        out.append(entry)
    results["inproc"] = out


def scenario_allocations(ctx: Context, notifyd: System | None, results: dict) -> None:
    s = ctx.settings
    out: dict = {"micro": [], "daemon": [], "library": []}
    env = dict(os.environ, LD_PRELOAD=str(ctx.malloccount))
    log("allocations: micro-benchmark of decode/encode")
    p = spawn([str(ctx.alloc_bench), "--iterations", str(s.alloc_iterations)], env=env)
    try:
        stdout, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        kill(p)
        stdout, err = "", "timed out"
    if p in children:
        children.remove(p)
    for line in stdout.splitlines():
        if line.startswith("{"):
            out["micro"].append(json.loads(line))
    if not out["micro"]:
        out["micro_error"] = err[-500:]
    if notifyd is not None:
        counter = ctx.tmp / "notifyd.malloccount"
        daemon = Notifyd(ctx)
        try:
            notifyd.stop()
            daemon.start(env_extra={"LD_PRELOAD": str(ctx.malloccount), "MALLOCCOUNT_FILE": str(counter)})

            def read() -> int:
                with open(counter, "rb") as f:
                    return struct.unpack_from("<Q", f.read(8))[0]
            for subscribers in (1, 16):
                log(f"allocations: daemon, fan-out S={subscribers}")
                box = {}
                r = run_fanout(ctx, daemon, subscribers, 64, before_pub=lambda: box.update(a=read()))
                allocations = read() - box["a"]
                out["daemon"].append({"subscribers": subscribers, "posted": r["posted"], "delivered": r["delivered"],
                                      "allocs_per_post": round(allocations / max(r["posted"], 1), 3),
                                      "allocs_per_delivery": round(allocations / max(r["delivered"], 1), 3)})
            swift = NotifydSwift(ctx)
            swift.address, swift.pid = daemon.address, daemon.pid
            log("allocations: Swift library poster and subscriber")
            r = run_fanout(ctx, swift, 1, 64, pub_env=env, sub_env=env)
            out["library"].append({"posted": r["posted"], "poster_allocs_per_post": r.get("allocs_per_post"),
                                   "subscriber_allocs_per_note": r.get("sub_allocs_per_note"), "target": "queue"})
            r = run_fanout(ctx, swift, 1, 64, pub_system=daemon, sub_env=env, sub_args=("--target", "immediate"))
            out["library"].append({"posted": r["posted"], "subscriber_allocs_per_note": r.get("sub_allocs_per_note"),
                                   "target": "immediate"})
        except Exception as e:  # noqa: BLE001
            out["daemon_error"] = str(e)[-500:]
        finally:
            daemon.stop()
            notifyd.start()
    results["allocations"] = out


def scenario_profile(ctx: Context, notifyd: System, results: dict) -> None:
    """Optional (--profile): perf samples of the daemon during fan-out (S=16 unless --profile-subscribers)."""
    subscribers = ctx.profile_subscribers
    if not shutil.which("perf"):
        results["profile"] = {"error": "perf is not installed (apt-get install linux-perf)"}
        return
    log(f"profile: perf record of notifyd during fan-out S={subscribers}")
    data = ctx.tmp / "perf.data"
    perf = spawn(["perf", "record", "-e", "cpu-clock", "-F", "2000", "-g", "-p", str(notifyd.pid), "-o", str(data)],
                 stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    run = run_fanout(ctx, notifyd, subscribers, 64)
    os.kill(perf.pid, signal.SIGINT)
    perf.wait(timeout=60)
    children.remove(perf)
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio", "--percent-limit", "0.7",
                             "-g", "none", "--sort", "symbol"], capture_output=True, text=True).stdout
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"profile-notifyd-fanout{subscribers}.txt").write_text(report)
    results["profile"] = {"file": f"Benchmarks/results/profile-notifyd-fanout{subscribers}.txt",
                          "delivered_per_s": run.get("delivered_per_s")}


# ---------------------------------------------------------------- report

def find(rows, **keys):
    for r in rows or []:
        if all(r.get(k) == v for k, v in keys.items()) and "error" not in r:
            return r
    return None


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def evaluate_targets(results: dict, available: dict) -> list[dict]:
    targets = []

    def add(name, value, threshold, better, note=""):
        met = None if value is None else (value >= threshold if better == "higher" else value <= threshold)
        targets.append({"target": name, "value": None if value is None else round(value, 3),
                        "wanted": (">= " if better == "higher" else "<= ") + f"{threshold:,}",
                        "threshold": threshold, "met": met, "note": note})

    fan = results.get("fanout", [])

    def rate(system, n, payload=64):
        r = find(fan, system=system, subscribers=n, payload=payload)
        return r.get("delivered_per_s") if r else None
    def cpu(system, n, payload=64):
        r = find(fan, system=system, subscribers=n, payload=payload)
        return r.get("server_cpu_us_per_delivery") if r else None
    for n in (1, 4, 16):
        c = rate("notifyd-c", n)
        add(f"fan-out S={n}: notifyd (C client) / C relay", ratio(c, rate("relay", n)), 0.7, "higher")
        add(f"fan-out S={n}: notifyd (C client) / Redis", ratio(c, rate("redis", n)), 2.0, "higher",
            "" if available.get("redis") else "Redis skipped")
        add(f"fan-out S={n}: notifyd (C client) / dbus-broker", ratio(c, rate("dbus-broker", n)), 10.0, "higher",
            "" if available.get("dbus-broker") else "dbus-broker skipped")
        add(f"fan-out S={n}: notifyd (Swift library) / Redis", ratio(rate("notifyd-swift", n), rate("redis", n)), 1.0,
            "higher", "" if available.get("redis") else "Redis skipped")
        # The steadier view of the same runs: server CPU per delivered notification (informational, no target).
        targets.append({"target": f"(info) fan-out S={n}: server CPU per delivery, notifyd / Redis; notifyd / relay",
                        "value": None, "threshold": None, "met": None, "wanted": "",
                        "note": "; ".join(f"{x:.2f}" if x is not None else "–" for x in
                                          (ratio(cpu("notifyd-c", n), cpu("redis", n)), ratio(cpu("notifyd-c", n), cpu("relay", n))))})
    rtt = results.get("rtt", [])

    def p(system, key):
        r = find(rtt, system=system)
        return r.get(key) if r else None
    add("round trip p50: notifyd (C client) / C relay", ratio(p("notifyd-c", "p50_us"), p("relay", "p50_us")), 1.25, "lower")
    add("round trip p50: notifyd (C client) / Redis", ratio(p("notifyd-c", "p50_us"), p("redis", "p50_us")), 1.0, "lower")
    add("round trip p99: notifyd (C client) / C relay", ratio(p("notifyd-c", "p99_us"), p("relay", "p99_us")), 1.5, "lower")
    # Issue 13 raised the throttled targets of issue 6 (the rows above).
    for n in (1, 4, 16):
        add(f"issue 13 · throttled fan-out S={n}: notifyd (C client) / C relay", ratio(rate("notifyd-c", n), rate("relay", n)),
            1.0, "higher")
    for n in (1, 4, 16):
        add(f"issue 13 · throttled fan-out S={n}: notifyd (Swift library) / Redis",
            ratio(rate("notifyd-swift", n), rate("redis", n)), 2.0, "higher",
            "" if available.get("redis") else "Redis skipped")
    add("issue 13 · throttled fan-out 4 × 16 KiB: notifyd (Swift library) / Redis",
        ratio(rate("notifyd-swift", 4, 16384), rate("redis", 4, 16384)), 1.0, "higher",
        "" if available.get("redis") else "Redis skipped")
    add("issue 13 · throttled fan-out 4 × 16 KiB: notifyd (C client) / C relay",
        ratio(rate("notifyd-c", 4, 16384), rate("relay", 4, 16384)), 0.9, "higher")
    runs = find(rtt, system="notifyd-c") or {}
    add("issue 13 · round trip p50: notifyd (C client) / C relay", ratio(p("notifyd-c", "p50_us"), p("relay", "p50_us")),
        1.1, "lower", ("pinned" if runs.get("pinned") else "unpinned (the target is on pinned runs)")
        + (f", {runs['runs']} interleaved runs" if runs.get("runs") else ""))
    pats = results.get("patterns", [])
    none = find(pats, system="notifyd-c", patterns=0)
    most = max((r for r in pats if r.get("system") == "notifyd-c" and "error" not in r),
               key=lambda r: r["patterns"], default=None)
    if none and most and most is not none:
        add(f"{most['patterns']:,} non-matching patterns: time per post / none",
            ratio(none["delivered_per_s"], most["delivered_per_s"]), 1.5, "lower")
    conns = find(results.get("connections", []), system="notifyd-c")
    per_connection = conns.get("bytes_per_connection") if conns else None
    add("daemon RSS per idle connection (bytes)", per_connection, 32 * 1024, "lower")
    add("daemon RSS per subscription (bytes)", conns.get("bytes_per_subscription") if conns else None, 256, "lower")
    redis_conns = find(results.get("connections", []), system="redis")
    add("issue 13 · connect + subscribe + disconnect: notifyd (C client) / Redis",
        ratio(conns and conns.get("churn_per_s"), redis_conns and redis_conns.get("churn_per_s")), 1.0, "higher",
        "" if redis_conns else "Redis not run")
    add("issue 13 · daemon RSS per idle connection (bytes)", per_connection, 12_000, "lower")
    names = {r["system"]: r for r in results.get("names", []) if r.get("delivered_per_s")}
    add("issue 13 · many names: notifyd (C client) / C relay",
        ratio(names.get("notifyd-c", {}).get("delivered_per_s"), names.get("relay", {}).get("delivered_per_s")),
        0.7, "higher", "" if "relay" in names else "relay not run")
    targets.extend(issue13_targets(results))
    stopped = find(results.get("stopped", []), system="notifyd-c")
    if stopped:
        add("SIGSTOPped subscriber: others' throughput / the same fan-out without it (adjacent runs)",
            stopped.get("ratio_to_adjacent_plain"), 0.9, "higher")
        add("SIGSTOPped subscriber: others' throughput / scenario 1 (S=4)",
            ratio(stopped.get("delivered_per_s"), rate("notifyd-c", 4)), 0.9, "higher")
    hostile = results.get("hostile") or {}
    idle = hostile.get("idle") or {}
    for mode, what in (("attacked", "another uid's slow subscriber + flood"),
                       ("quotas", "another uid at every quota, plus the flood")):
        under = hostile.get(mode) or {}
        elsewhere = hostile.get("elsewhere") or {}
        if idle.get("p99_us") and under.get("p99_us"):
            control = ""
            if elsewhere.get("p99_us"):
                control = (f"; the same attack on another daemon (the machine's share alone): p99 "
                           f"{elsewhere['p99_us']:.0f} µs = {elsewhere['p99_us'] / idle['p99_us']:.1f}× idle")
            add(f"issue 15 · {what}: round-trip p99 under attack / idle", under["p99_us"] / idle["p99_us"], 2.0, "lower",
                f"p50 {idle['p50_us']:.0f} → {under['p50_us']:.0f} µs, p99 {idle['p99_us']:.0f} → {under['p99_us']:.0f} µs, "
                f"{under['runs']} + {idle['runs']} runs" + control)
        if under.get("fanout_delivered_per_s") and elsewhere.get("fanout_delivered_per_s"):
            # On 2 cores the attack's own processes take CPU from the victim wherever they are: the control with the
            # same attack on another daemon is the throughput the machine leaves; the daemon must not take more.
            add(f"issue 15 · {what}: fan-out throughput under attack / the same attack on another daemon",
                under["fanout_delivered_per_s"] / elsewhere["fanout_delivered_per_s"], 0.9, "higher",
                f"S=4, 64 B: idle {fmt_rate(idle.get('fanout_delivered_per_s'))}, attacked "
                f"{fmt_rate(under['fanout_delivered_per_s'])}, attack elsewhere {fmt_rate(elsewhere['fanout_delivered_per_s'])}")
    return targets


def issue13_targets(results: dict) -> list[dict]:
    """Issue 13's targets for the unthrottled scenarios (rows marked "issue 13")."""
    out = []
    rows = results.get("unthrottled", [])
    if not rows:
        return out

    def add(name, value, threshold, better, note=""):
        met = None if value is None else (value >= threshold if better == "higher" else value <= threshold)
        out.append({"target": "issue 13 · " + name, "value": None if value is None else round(value, 3),
                    "wanted": (">= " if better == "higher" else "<= ") + f"{threshold:,}", "threshold": threshold,
                    "met": met, "note": note})

    def get(system, n, policy):
        r = find(rows, system=system, subscribers=n, policy=policy)
        return r if r and r.get("delivered_per_s") else None
    sizes = sorted({r["subscribers"] for r in rows})
    policies = [p for p in ("queue:unbounded", "queue:1000", "coalesce")
                if any(r.get("policy") == p for r in rows)]
    for n in sizes:
        for policy in policies:
            r = get("notifyd-c", n, policy)
            if r is None:
                add(f"unthrottled {policy} S={n}: minimum / median throughput", None, 0.5, "higher", "no run succeeded")
                continue
            d = r["delivered_per_s"]
            add(f"unthrottled {policy} S={n}: minimum / median throughput", d["min"] / d["median"], 0.5, "higher",
                f"min {fmt_rate(d['min'])}, median {fmt_rate(d['median'])}, max {fmt_rate(d['max'])}, {d['n']} runs")
    # Held path against the direct path. Most unthrottled runs never hold (the subscribers keep within the 8 MiB
    # pending bound), so their medians say little about the held path: the rows below use only the runs that
    # show holding (a NOTIFICATION_MERGED or an OVERFLOW reached a subscriber), and the held-path-alone runs.
    for n in sizes:
        direct = get("notifyd-c", n, "direct")
        b = direct and direct.get("server_cpu_us_per_note")
        for policy in policies:
            r = get("notifyd-c", n, policy)
            held = [x for x in (r or {}).get("run_list", []) if x.get("merged") or x.get("dropped")]
            cpu_held = [x["server_cpu_us_per_note"] for x in held if x.get("server_cpu_us_per_note")]
            a = statistics.median(cpu_held) if cpu_held else None
            value = ratio(a, b and b["median"])
            if not r:
                note = "no run succeeded"
            elif not cpu_held:
                note = f"not exercised: no run of {r['runs']} merged or dropped anything"
            else:
                note = (f"median of the {len(cpu_held)} of {r['runs']} runs that held: {a:.3f} µs (worst "
                        f"{max(cpu_held):.3f}) vs {b['median']:.3f} µs direct (median); all runs' median "
                        f"{r['server_cpu_us_per_note']['median']:.3f}")
                if policy == "coalesce":
                    note += "; merged posts count as delivered"
            add(f"unthrottled {policy} S={n}: daemon CPU per delivered notification in runs that held / direct path",
                value, 2.0, "lower", note)
    held_alone = results.get("unthrottled_held", [])
    direct1 = get("notifyd-c", 1, "direct") or get("notifyd-c", sizes[0], "direct")
    for h in held_alone:
        c = h.get("server_cpu_us_per_post")
        b = direct1 and direct1.get("server_cpu_us_per_note")
        note = ""
        if c and b:
            note = (f"{c['median']:.3f} µs per held post (min {c['min']:.3f}, max {c['max']:.3f}, {c['n']} runs) vs "
                    f"{b['median']:.3f} µs per direct delivery at S = {direct1['subscribers']}")
        add(f"held path alone, {h['policy']} (one stopped subscriber): daemon CPU per post / direct path",
            ratio(c and c["median"], b and b["median"]), 2.0, "lower", note or h.get("error", ""))
    for peer, label, threshold in (("relay", "C relay", 1.0), ("redis", "Redis", 5.0)):
        for n in sizes:
            p = get(peer, n, "native")
            for policy in policies:
                r = get("notifyd-c", n, policy)
                value = ratio(r and r["delivered_per_s"]["median"], p and p["delivered_per_s"]["median"])
                note = "" if p else f"{label} not run or failed"
                if r and p:
                    note = f"{fmt_rate(r['delivered_per_s']['median'])} vs {fmt_rate(p['delivered_per_s']['median'])}"
                add(f"unthrottled {policy} S={n}: median throughput / {label} (native)", value, threshold, "higher", note)
    st = find(results.get("unthrottled_stopped", []), system="notifyd-c")
    if st:
        add("unthrottled, SIGSTOPped queue(100000) subscriber: others' median throughput / without it",
            st.get("ratio_median"), 0.9, "higher",
            "pairs " + ", ".join(f"{x:.2f}" for x in st.get("ratio_pairs", [])))
        if st.get("peak_rss_kib"):
            bound = 16 * 1024 * (st["readers"] + 1)  # 8 MiB pending + 8 MiB held per subscriber connection
            add("unthrottled, SIGSTOPped subscriber: daemon peak RSS growth (MiB) within 4 x (8 MiB pending + 8 MiB held)",
                st["growth_kib"] / 1024, bound / 1024, "lower",
                f"peak RSS (VmHWM) {st['peak_rss_kib'] / 1024:.1f} MiB")
    return out


def fmt_rate(v):
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M/s"
    if v >= 1e3:
        return f"{v / 1e3:.0f} k/s"
    return f"{v:.0f}/s"


def fmt(v, digits=2, suffix=""):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{suffix}"
    return f"{v:,}{suffix}"


def render_markdown(data: dict, chart_links: dict[str, str] | None = None) -> str:
    """The results as markdown tables; chart_links ({chart name: link relative to the markdown file}) puts each
    picture of Benchmarks/charts.py under the table it draws."""
    meta, res, systems = data["meta"], data["results"], data["systems"]
    keys = [k for k in systems if systems[k]["available"]]
    label = {k: v["label"] for k, v in systems.items()}
    lines = []
    pending = dict(chart_links or {})

    def embed(name: str) -> None:
        if name in pending:
            lines.append(charts.markdown_image(name, pending.pop(name)))
            lines.append("")

    m = meta["machine"]
    lines.append(f"Run {meta['date']} · mode `{meta['mode']}` · {meta['duration_s']:.0f} s · "
                 f"`{meta['command']}`  ")
    lines.append(f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}  ")
    v = meta["versions"]
    lines.append("Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + "  ")
    load = meta.get("load")
    if load:
        b = load["load_before"]
        text = f"Load: {b[0]:.2f} / {b[1]:.2f} / {b[2]:.2f} (1 / 5 / 15 min) before the scenarios"
        if load.get("competing_before"):
            text += f" with {', '.join(load['competing_before'])} running"
        text += (f"; other builds seen in {load['samples_with_competing_builds']} of {load['samples']} samples during the run"
                 + (f" ({', '.join(load['competing_seen'])})" if load.get("competing_seen") else ""))
        lines.append(text + "  ")
    skipped = [f"{label[k]} ({systems[k]['reason']})" for k in systems if not systems[k]["available"]]
    if skipped:
        lines.append("Skipped: " + "; ".join(skipped) + "  ")
    lines.append("")

    fan = res.get("fanout", [])
    if fan:
        lines.append("**1 · Fan-out** — delivered notifications/s (median of runs where repeated); "
                     "in brackets: daemon/broker CPU µs per delivered notification")
        lines.append("")
        configs = []
        for r in fan:
            c = (r["subscribers"], r["payload"])
            if c not in configs:
                configs.append(c)
        lines.append("| S × payload | " + " | ".join(label[k] for k in keys) + " | notifyd C / relay | C / Redis | C / dbus-broker | Swift / Redis |")
        lines.append("|---|" + "---|" * (len(keys) + 4))
        for n, payload in configs:
            cells = []
            for k in keys:
                r = find(fan, system=k, subscribers=n, payload=payload)
                if r is None:
                    err = next((x.get("error") for x in fan if x.get("system") == k and x.get("subscribers") == n and x.get("payload") == payload), None)
                    cells.append("error" if err else "–")
                else:
                    flag = "" if r.get("complete", True) else " ⚠"
                    cells.append(f"{fmt_rate(r.get('delivered_per_s'))} ({fmt(r.get('server_cpu_us_per_delivery'), 3)}){flag}")

            def rt(a, b):
                ra, rb = find(fan, system=a, subscribers=n, payload=payload), find(fan, system=b, subscribers=n, payload=payload)
                x = ratio(ra and ra.get("delivered_per_s"), rb and rb.get("delivered_per_s"))
                return "–" if x is None else f"{x:.2f}×"
            lines.append(f"| {n} × {payload} B | " + " | ".join(cells) + f" | {rt('notifyd-c', 'relay')} | {rt('notifyd-c', 'redis')} | {rt('notifyd-c', 'dbus-broker')} | {rt('notifyd-swift', 'redis')} |")
        lines.append("")
        embed("fanout")

    rtt = res.get("rtt", [])
    if rtt:
        pins = next((r["pinned"] for r in rtt if r.get("pinned")), None)
        where = (f"; pinned: the server on CPU {','.join(map(str, pins['server_cpus']))}, both clients on CPU "
                 f"{','.join(map(str, pins['client_cpus']))}" if pins else "; unpinned")
        lines.append("**2 · Round trip** (ping → pong through the system, 64 B), µs; median of interleaved runs" + where)
        lines.append("")
        lines.append("| system | p50 | p99 | p99.9 | max | samples |")
        lines.append("|---|---|---|---|---|---|")
        for r in rtt:
            if "error" in r:
                lines.append(f"| {label[r['system']]} | error: {r['error'][:80]} | | | | |")
            else:
                lines.append(f"| {label[r['system']]} | {fmt(r['p50_us'], 1)} | {fmt(r['p99_us'], 1)} | {fmt(r['p999_us'], 1)} | {fmt(r['max_us'], 0)} | {r['samples']:,} |")
        lines.append("")
        embed("rtt")  # its right half is scenario 10 (a hostile user), when that ran

    names = res.get("names", [])
    if names:
        n = names[0].get("names")
        repeated = any(len(r.get("runs") or []) > 1 for r in names)
        lines.append(f"**3 · Many names** ({n:,} names, one subscriber each, spread over 4 processes; posts spread over all names"
                     + ("; the median of interleaved runs, each on a fresh server)" if repeated else ")"))
        lines.append("")
        lines.append("| system | posts delivered/s | runs (min – max) | server CPU µs/delivery | subscribe time | server RSS after subscribing |")
        lines.append("|---|---|---|---|---|---|")
        for r in names:
            if "error" in r:
                lines.append(f"| {label[r['system']]} | error: {r['error'][:100]} | | | | |")
            else:
                each = r.get("runs") or []
                spread = f"{len(each)} ({fmt_rate(min(each))} – {fmt_rate(max(each))})" if len(each) > 1 else str(len(each))
                if r.get("failed_runs"):
                    spread += f", {r['failed_runs']} failed"
                if r.get("incomplete_runs"):
                    spread += f", {r['incomplete_runs']} incomplete"
                lines.append(f"| {label[r['system']]} | {fmt_rate(r.get('delivered_per_s'))}{'' if r.get('complete') else ' ⚠ incomplete'} | {spread} | {fmt(r.get('server_cpu_us_per_delivery'), 3)} | {fmt(r.get('subscribe_seconds'), 2, ' s')} | {fmt((r.get('server_rss_kib') or 0) / 1024, 1, ' MiB')} |")
        lines.append("")

    pats = res.get("patterns", [])
    if pats:
        lines.append("**4 · Pattern scaling** (fan-out S=1, 64 B, while N non-matching pattern subscriptions exist)")
        lines.append("")
        lines.append("| system | patterns | delivered/s | server CPU µs/delivery | time per post vs none |")
        lines.append("|---|---|---|---|---|")
        for r in pats:
            if "error" in r:
                lines.append(f"| {label[r['system']]} | {r['patterns']:,} | error: {r['error'][:80]} | | |")
                continue
            base = find(pats, system=r["system"], patterns=0)
            x = ratio(base and base.get("delivered_per_s"), r.get("delivered_per_s"))
            lines.append(f"| {label[r['system']]} | {r['patterns']:,} | {fmt_rate(r.get('delivered_per_s'))} | {fmt(r.get('server_cpu_us_per_delivery'), 3)} | {'–' if x is None else f'{x:.2f}×'} |")
        lines.append("")

    stopped = res.get("stopped", [])
    if stopped:
        lines.append("**5 · A SIGSTOPped subscriber during fan-out** (4 reading subscribers + 1 stopped, 64 B)")
        lines.append("")
        lines.append("| system | others' delivered/s | vs the same fan-out without it (before/after, same instance) | vs scenario 1 (S=4) | server peak RSS (VmHWM) | RSS growth | stopped subscriber after SIGCONT |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in stopped:
            if "error" in r:
                lines.append(f"| {label[r['system']]} | error: {r['error'][:80]} | | | | | |")
                continue
            base = find(fan, system=r["system"], subscribers=4, payload=64)
            x = ratio(r.get("delivered_per_s"), base and base.get("delivered_per_s"))
            victim = r.get("stopped_subscriber") or {}
            vtext = f"received {victim.get('received', '?'):,}" if isinstance(victim.get("received"), int) else "?"
            if victim.get("lost"):
                vtext += f", {victim['lost']:,} merged/dropped reported"
            if victim.get("error"):
                vtext += f", {victim['error'][:60]}"
            growth = None
            if r.get("peak_rss_kib") and r.get("rss_before_kib"):
                growth = (r["peak_rss_kib"] - r["rss_before_kib"]) / 1024
            adj = r.get("ratio_to_adjacent_plain")
            lines.append(f"| {label[r['system']]} | {fmt_rate(r.get('delivered_per_s'))} | {'–' if adj is None else f'{adj:.0%}'} | {'–' if x is None else f'{x:.0%}'} | {fmt((r.get('peak_rss_kib') or 0) / 1024, 1, ' MiB')} | {fmt(growth, 1, ' MiB')} | {vtext} |")
        lines.append("")

    conns = res.get("connections", [])
    if conns:
        repeated = any(len(r.get("churn_runs") or []) > 1 for r in conns)
        lines.append("**6 · Connections** (idle connections × 10 subscriptions each; server RSS deltas"
                     + ("; connect + subscribe + disconnect: the median of interleaved runs, each on a fresh server)"
                        if repeated else ")"))
        lines.append("")
        lines.append("| system | connections | RSS per connection | RSS per subscription | connect + subscribe + disconnect /s | runs (min – max) |")
        lines.append("|---|---|---|---|---|---|")
        for r in conns:
            each = r.get("churn_runs") or []
            spread = f"{len(each)} ({fmt(min(each), 0)} – {fmt(max(each), 0)})" if len(each) > 1 else str(len(each))
            if r.get("churn_failed_runs"):
                spread += f", {r['churn_failed_runs']} failed"
            if "error" in r:
                lines.append(f"| {label[r['system']]} | error: {r['error'][:80]} | | | {fmt(r.get('churn_per_s'), 0)} | {spread} |")
                continue
            lines.append(f"| {label[r['system']]} | {r['connections']:,} | {fmt(r.get('bytes_per_connection'), 0, ' B')} | {fmt(r.get('bytes_per_subscription'), 0, ' B')} | {fmt(r.get('churn_per_s'), 0)} | {spread} |")
        lines.append("")

    inproc = res.get("inproc", [])
    if inproc:
        lines.append("**7 · In-process delivery through the Swift library** (64 B)")
        lines.append("")
        lines.append("| path | handler target | notifications/s |")
        lines.append("|---|---|---|")
        for r in inproc:
            path = "daemon → library I/O thread → handler (C poster)" if r["mode"] == "daemon" else "`self.` name, post → handler, no daemon"
            lines.append(f"| {path} | {r['target']} | {fmt_rate(r.get('delivered_per_s')) if 'error' not in r else 'error'} |")
        lines.append("")

    flood = res.get("unthrottled", [])
    if flood:
        lines.append("**8 · Unthrottled poster** (issue 13; 64 B, one name; the poster writes with no window; "
                     "min / median / max over the runs; throughput = notification frames received per second)")
        lines.append("")
        lines.append("| S | system | policy | runs | delivered/s min | median | max | min / median | "
                     "daemon CPU µs per delivered frame (min / median / max) | per notification (frames + merged), median | "
                     "merged frames / merged posts / dropped (median) | not accounted for (median) | max backlog (median) | complete |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in flood:
            pol = r.get("policy")
            pol_text = {"direct": "direct path: throttled poster (window 1,000), queue(unbounded)",
                        "queue:unbounded": "queue(4294967295)", "queue:1000": "queue(1000)",
                        "native": "native"}.get(pol, pol)
            if r.get("error"):
                lines.append(f"| {r['subscribers']} | {label[r['system']]} | {pol_text} | {r['runs']} | error: {r['error'][:80]} |"
                             + " |" * 9)
                continue
            d, c = r["delivered_per_s"], r.get("server_cpu_us_per_delivery") or {}
            cn = r.get("server_cpu_us_per_note") or {}
            ok = r.get("complete_runs", 0)
            n_ok = r["runs"] - r.get("failed_runs", 0)
            extra = []
            if r.get("failed_runs"):
                extra.append(f"{r['failed_runs']} failed")
            if r.get("cut_runs"):
                extra.append(f"{r['cut_runs']} cut at the time bound")
            if r.get("subscriber_error_runs"):
                extra.append(f"{r['subscriber_error_runs']} with a subscriber error")
            lines.append(
                f"| {r['subscribers']} | {label[r['system']]} | {pol_text} | {r['runs']} | {fmt_rate(d['min'])} | "
                f"{fmt_rate(d['median'])} | {fmt_rate(d['max'])} | {d['min'] / d['median']:.2f} | "
                f"{fmt(c.get('min'), 3)} / {fmt(c.get('median'), 3)} / {fmt(c.get('max'), 3)} | {fmt(cn.get('median'), 3)} | "
                f"{fmt(r.get('merged_frames_median'), 0)} / {fmt(r.get('merged_median'), 0)} / {fmt(r.get('dropped_median'), 0)} | "
                f"{fmt(r.get('unaccounted_median'), 0)} | {fmt(r.get('max_lag_median'), 0)} | {ok}/{n_ok}"
                f"{(' (' + ', '.join(extra) + ')') if extra else ''} |")
        lines.append("")
        lines.append("Posts per run: " + ", ".join(f"S = {n}: {p:,}" for n, p in sorted(
            {(r["subscribers"], r["posts"]) for r in flood})) + ". The relay's native behaviour: a subscriber's "
                     "output is bounded at 8 MiB and newer notifications beyond it are dropped silently (\"not accounted "
                     "for\"). Redis's: everything is buffered up to `client-output-buffer-limit pubsub 32mb 8mb 60`, "
                     "then the subscriber is disconnected. notifyd: the policy in the table; what is held is bounded at "
                     "8 MiB per connection (the oldest is evicted and reported in `OVERFLOW`, counted as dropped). "
                     "Max backlog: posts not yet received (or reported merged/dropped) by the slowest subscriber, "
                     "sampled while posting.")
        lines.append("")
        embed("unthrottled")

    held = res.get("unthrottled_held", [])
    if held:
        lines.append("**8b · The held path alone** (one SIGSTOPped notifyd subscriber, no reader: every post after the "
                     "first ≈ 8 MiB is held; the unthrottled poster)")
        lines.append("")
        lines.append("| policy | runs | posts per run | daemon CPU µs per post (min / median / max) | posts/s (median) | "
                     "daemon RSS growth (median) |")
        lines.append("|---|---|---|---|---|---|")
        for h in held:
            c = h.get("server_cpu_us_per_post") or {}
            pps = h.get("posts_per_s") or {}
            g = h.get("rss_growth_kib") or {}
            pol = "queue(4294967295)" if h["policy"] == "queue:unbounded" else h["policy"].replace(":", "(") + (
                ")" if ":" in h["policy"] else "")
            lines.append(f"| {pol} | {h['runs']}{(' (' + str(h['failed_runs']) + ' failed)') if h.get('failed_runs') else ''} | "
                         f"{h['posts']:,} | {fmt(c.get('min'), 3)} / {fmt(c.get('median'), 3)} / {fmt(c.get('max'), 3)} | "
                         f"{fmt_rate(pps.get('median'))} | {fmt((g.get('median') or 0) / 1024, 1, ' MiB')} |")
        lines.append("")

    hostile = res.get("hostile") or {}
    if hostile.get("idle"):
        lines.append("**10 · A hostile user** (issue 15: uid 65534 holds a SIGSTOPped queue(100000) subscriber and floods "
                     "its name with 16-byte posts from an unthrottled poster; another user's round trips, 64 B, then its "
                     "fan-out to 4 subscribers, through the same daemon; alternating runs, medians)")
        lines.append("")
        lines.append("| victim | runs | round trip p50 | p99 | p99.9 | max | fan-out S=4, 64 B |")
        lines.append("|---|---|---|---|---|---|---|")
        for key, title in (("idle", "idle"), ("attacked", "slow subscriber + flood"),
                           ("quotas", "every quota taken + slow subscriber + flood"),
                           ("elsewhere", "control: the same flood on another daemon"),
                           ("idle_alt", "ALT build (--alt-bin), idle"),
                           ("attacked_alt", "ALT build, slow subscriber + flood")):
            h = hostile.get(key)
            if not h:
                continue
            lines.append(f"| {title} | {h['runs']}{(' (' + str(h['failed_runs']) + ' failed)') if h.get('failed_runs') else ''} | "
                         f"{fmt(h.get('p50_us'), 1)} µs | {fmt(h.get('p99_us'), 1)} µs | {fmt(h.get('p999_us'), 1)} µs | "
                         f"{fmt(h.get('max_us'), 0)} µs | {fmt_rate(h.get('fanout_delivered_per_s'))} |")
        lines.append("")
        if hostile["attacked"].get("runs"):
            lines.append(f"The flood was still posting at the end of {hostile['attacked'].get('attack_outlasted_runs', 0)} "
                         f"of {hostile['attacked']['runs']} attacked runs.")
        if hostile.get("quotas_taken"):
            q = hostile["quotas_taken"]
            lines.append(f"Quotas taken by the attacker (defaults): {q.get('connections')} connections (+ 2 for the flood), "
                         f"{q.get('pattern_subscriptions', 0) + q.get('exact_subscriptions', 0):,} subscriptions "
                         f"({q.get('pattern_subscriptions')} of them patterns of 16 labels), {q.get('state_names'):,} "
                         f"state names, {q.get('retained_posts')} retained payloads of 60 KB.")
        lines.append("")
        embed("rtt")  # only the hostile user's round trips (scenario 2 did not run): the chart is theirs
    elif hostile.get("skipped") or hostile.get("error"):
        lines.append(f"**10 · A hostile user**: {hostile.get('skipped') or 'error: ' + hostile['error'][:200]}")
        lines.append("")

    fstop = res.get("unthrottled_stopped", [])
    if fstop:
        lines.append("**9 · A SIGSTOPped subscriber under the unthrottled poster** (3 reading subscribers, notifyd "
                     "queue(4294967295), + 1 stopped, notifyd queue(100000); alternating runs with and without it on one "
                     "fresh instance)")
        lines.append("")
        lines.append("| system | runs | others' delivered/s with it (median; min–max) | without it (median; min–max) | "
                     "with / without (medians) | pairs | daemon peak RSS (VmHWM) with it | growth in a run | peak without it | "
                     "stopped subscriber after SIGCONT |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in fstop:
            if r.get("error"):
                lines.append(f"| {label[r['system']]} | error: {r['error'][:80]} |" + " |" * 8)
                continue
            st, pl = r["stopped"], r["plain"]
            sd, pd = st.get("delivered_per_s"), pl.get("delivered_per_s")

            def cell(d):
                return "–" if not d else f"{fmt_rate(d['median'])}; {fmt_rate(d['min'])}–{fmt_rate(d['max'])}"
            victim = r.get("victim_sample") or {}
            vtext = f"received {victim['received']:,}" if isinstance(victim.get("received"), int) else "?"
            if victim.get("lost"):
                vtext += f", {victim['lost']:,} reported merged/dropped"
            if victim.get("error"):
                vtext += f", {victim['error'][:60]}"
            lines.append(
                f"| {label[r['system']]} | {st['runs']} + {pl['runs']} | {cell(sd)} | {cell(pd)} | "
                f"{'–' if r.get('ratio_median') is None else format(r['ratio_median'], '.0%')} | "
                f"{', '.join(f'{x:.2f}' for x in r.get('ratio_pairs', []))} | "
                f"{fmt((r.get('peak_rss_kib') or 0) / 1024, 1, ' MiB')} | {fmt((r.get('growth_kib') or 0) / 1024, 1, ' MiB')} | "
                f"{fmt((r.get('plain_peak_rss_kib') or 0) / 1024, 1, ' MiB')} | {vtext} |")
        lines.append("")
        embed("unthrottled_stopped")

    allocs = res.get("allocations")
    if allocs:
        lines.append("**Allocations** (heap allocations counted with `libmalloccount.so`)")
        lines.append("")
        lines.append("| path | allocations | time |")
        lines.append("|---|---|---|")
        for r in allocs.get("micro", []):
            lines.append(f"| {r['case']} | {fmt(r.get('allocs_per_op'), 2)} per op | {fmt(r.get('ns_per_op'), 0)} ns/op |")
        for r in allocs.get("daemon", []):
            lines.append(f"| notifyd daemon, fan-out S={r['subscribers']} (decode + route + encode + write) | {fmt(r['allocs_per_post'], 2)} per post, {fmt(r['allocs_per_delivery'], 2)} per delivery | |")
        for r in allocs.get("library", []):
            if r.get("poster_allocs_per_post") is not None:
                lines.append(f"| Swift library poster (`post`) | {fmt(r['poster_allocs_per_post'], 2)} per post | |")
            lines.append(f"| Swift library subscriber, target {r['target']} | {fmt(r.get('subscriber_allocs_per_note'), 2)} per notification | |")
        lines.append("")

    vectors = res.get("protocol_vectors")
    if vectors:
        lines.append(f"C client decoder against `protocol/vectors`: {vectors.get('summary')}")
        lines.append("")
    targets = data.get("targets", [])
    if targets:
        lines.append("**Targets** (ratios from this run)")
        lines.append("")
        lines.append("| target | measured | wanted | |")
        lines.append("|---|---|---|---|")
        for t in targets:
            mark = "–" if t["met"] is None else ("met" if t["met"] else "**missed**")
            value = "–" if t["value"] is None else f"{t['value']:,}"
            wanted = t["wanted"].replace(">=", "≥").replace("<=", "≤")
            if t["target"].startswith("(info)"):
                lines.append(f"| {t['target'][7:]} | {t['note']} | (lower is better for notifyd) | info |")
                continue
            lines.append(f"| {t['target']} | {value} | {wanted} | {mark}{(' — ' + t['note']) if t['note'] else ''} |")
        lines.append("")
    for name in list(pending):  # a chart whose table is missing (cannot happen today): shown rather than lost
        embed(name)
    return "\n".join(lines)


CHARTS = BENCH / "charts"  # make bench's pictures, beside BENCHMARKS.md, which embeds them


def ensure_matplotlib() -> None:
    """make bench installs the tools it needs, as make lint does hadolint: matplotlib (for the charts) from PyPI
    with pip, into the interpreter running this script. Checked before the scenarios, so a machine where it
    cannot be installed fails now rather than after the whole run."""
    if charts.missing_dependency() is None:
        return
    log("matplotlib not found: installing it with pip (for the charts of the results)")
    output = []
    # As the Makefile's lint target: the interpreter's site-packages, else the user's (no root).
    for extra in ([], ["--user"]):
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            *extra, "matplotlib"], capture_output=True, text=True)
        output.append(f"pip install {' '.join(extra)}: " + (r.stdout + r.stderr).strip()[-800:])
        if r.returncode == 0:
            break
    importlib.invalidate_caches()
    user_site = site.getusersitepackages()
    if user_site not in sys.path and os.path.isdir(user_site):  # a --user install into a directory new to us
        sys.path.append(user_site)
    missing = charts.missing_dependency()
    if missing:
        raise SystemExit(f"run.py: the charts need matplotlib, and installing it failed: {missing}\n"
                         + "\n".join(output) + "\ninstall it with `python3 -m pip install matplotlib` (or Debian's "
                         "python3-matplotlib) and run again")


def draw_charts(data: dict, chart_dir: Path, *, smoke: bool) -> tuple[dict[str, Path], str | None]:
    """The charts of this run's results in chart_dir (Benchmarks/charts.py). Returns {name: PNG} and an error.
    In a smoke run a missing matplotlib is only a warning (make test does not install it); a drawing that fails
    is an error to report either way: the results themselves are written already."""
    missing = charts.missing_dependency()
    if missing:
        if smoke:
            log(f"warning: charts not drawn: {missing}")
            return {}, None
        return {}, missing
    try:
        drawn, notes = charts.draw_all(data, chart_dir)
    except Exception as e:  # noqa: BLE001 - the tables and latest.json must still be written
        traceback.print_exc()
        return {}, f"drawing the charts failed: {e!r}"
    for note in notes:
        log(f"chart not drawn: {note}")
    log(f"charts: {', '.join(str(p) for p in drawn.values()) or 'none'}")
    return drawn, None


def publish(data: dict, out_dir: Path, *, smoke: bool, into_benchmarks_md: bool) -> tuple[str, str | None]:
    """Writes a run's results: latest.json, the charts, latest.md, and (make bench) BENCHMARKS.md's results block.
    Returns latest.md's text and what went wrong with the charts, if anything."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(data, indent=2) + "\n")
    # Charts: make bench's beside BENCHMARKS.md; a smoke run's (and an --output run's) beside its own results,
    # so make test draws them without touching the committed ones.
    chart_dir = CHARTS if into_benchmarks_md else out_dir / "charts"
    drawn, chart_error = draw_charts(data, chart_dir, smoke=smoke)

    def links(md_dir: Path) -> dict[str, str]:  # each markdown file links the PNGs relative to itself
        return {name: Path(os.path.relpath(path, md_dir)).as_posix() for name, path in drawn.items()}

    markdown = render_markdown(data, links(out_dir))
    (out_dir / "latest.md").write_text(markdown + "\n")
    if into_benchmarks_md:
        update_benchmarks_md(render_markdown(data, links(BENCH)))
    if chart_error:
        # Not a failed run: every number is written, and the pictures can be drawn again from latest.json.
        log(f"warning: {chart_error}; draw them with: python3 Benchmarks/charts.py {out_dir / 'latest.json'} {chart_dir}")
    return markdown, chart_error


def update_benchmarks_md(markdown: str) -> None:
    doc = BENCH / "BENCHMARKS.md"
    if not doc.exists():
        return
    text = doc.read_text()
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    if begin not in text or end not in text:
        return
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{markdown}\n{end}{tail}")


COMPETITORS = ("swift-build", "swift-frontend", "swiftc", "swift-driver", "swift-test", "cc1", "cc1plus", "ld",
               "ld.gold", "ld.lld")


def competing_processes() -> list[str]:
    """Compilers and builds running on the machine (not this run's children), for the record of a run's quiet."""
    mine = {p.pid for p in children} | {os.getpid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm in COMPETITORS or comm.startswith("notifydPackageT") or comm.endswith(".xctest"):
            found.append(comm)
    return found


class LoadWatch:
    """Samples the 1-minute load average and competing builds every few seconds while the scenarios run (bounded
    by the run itself; a daemon thread that stops with it). The benchmark itself loads both cores, so the load
    before the first scenario is the figure that says how quiet the machine was; a compiler seen during the run
    means the numbers were measured beside it."""

    def __init__(self, period: float = 5.0):
        self.period = period
        self.samples: list[tuple[float, float, int]] = []
        self.names: set[str] = set()
        self.before = os.getloadavg()
        self.before_competing = competing_processes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.time()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            found = competing_processes()
            self.names.update(found)
            self.samples.append((round(time.time() - self._started, 1), round(os.getloadavg()[0], 2), len(found)))

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=self.period + 5)
        busy = [t for t, _, n in self.samples if n]
        return {"load_before": [round(x, 2) for x in self.before],
                "competing_before": sorted(set(self.before_competing)),
                "load_max": max((l for _, l, _ in self.samples), default=None),
                "samples": len(self.samples), "samples_with_competing_builds": len(busy),
                "competing_seen": sorted(self.names)}


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / (1024 * 1024)
    except OSError:
        mem = 0
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "kernel": platform.release()}


def versions(ctx: Context) -> dict:
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "Sources", "Package.swift"],
                           capture_output=True, text=True).stdout.strip()
    return {
        "notifyd": f"{version_of([str(ctx.notifyd), '--version']) or '?'} ({rev}{'+uncommitted' if dirty else ''}, {ctx.config})",
        "swift": version_of(["swift", "--version"], r"Swift version (\S+)"),
        "redis": version_of(["redis-server", "--version"], r"v=(\S+)"),
        "hiredis": pkg_version("hiredis"),
        "dbus-broker": version_of(["dbus-broker", "--version"], r"(\d+)"),
        "dbus-daemon": version_of(["dbus-daemon", "--version"]),
        "libsystemd": pkg_version("libsystemd"),
        "gcc": version_of(["gcc", "--version"], r"(\d+\.\d+\.\d+)"),
    }


# ---------------------------------------------------------------- main

ALL_SCENARIOS = ["fanout", "rtt", "names", "patterns", "stopped", "connections", "inproc", "allocations", "unthrottled",
                 "unthrottled_stopped", "hostile"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny counts, debug build: checks that everything runs")
    parser.add_argument("--quick", action="store_true", help="shorter run (also BENCH_QUICK=1)")
    parser.add_argument("--config", default=None, help="swift build configuration (default: release; debug for --smoke)")
    parser.add_argument("--scratch-path", default=None, help="swift build scratch path of the root package (notifyd, "
                        "notify-alloc-bench; default .build-bench; .build for --smoke)")
    parser.add_argument("--bench-scratch-path", default=None, help="swift build scratch path of the benchmark package "
                        "Benchmarks/Package.swift (notify-bench; default SCRATCH-PATH/benchmarks)")
    parser.add_argument("--no-swift-build", action="store_true",
                        help="use the existing Swift builds of both packages (make test builds them first)")
    parser.add_argument("--systems", default="", help="comma-separated subset of: " + ",".join(c.key for c in SYSTEM_CLASSES))
    parser.add_argument("--scenarios", default="", help="comma-separated subset of: " + ",".join(ALL_SCENARIOS))
    parser.add_argument("--rtt-unpinned", action="store_true",
                        help="round trips without pinning the server and the clients to separate CPUs")
    parser.add_argument("--profile", action="store_true", help="also record a perf profile of notifyd (fan-out S=16)")
    parser.add_argument("--profile-subscribers", type=int, default=16, help="subscribers in the --profile fan-out")
    parser.add_argument("--alt-bin", default=None,
                        help="a bin directory with another build of notifyd (and notify-bench): runs it as the extra "
                             "systems notifyd-c-alt / notifyd-swift-alt, for before/after comparisons")
    parser.add_argument("--alt-bench-bin", default=None,
                        help="the bin directory of that build's notify-bench (its Benchmarks package; default: "
                             "--alt-bin, where builds from before Benchmarks/Package.swift have it)")
    parser.add_argument("--output", default=None, help="results directory (default Benchmarks/results; smoke: a temp dir)")
    args = parser.parse_args()
    args.mode = "smoke" if args.smoke else ("quick" if args.quick or os.environ.get("BENCH_QUICK") == "1" else "full")
    args.config = args.config or ("debug" if args.smoke else "release")
    args.scratch_path = args.scratch_path or (".build" if args.smoke else ".build-bench")
    if not args.smoke:
        ensure_matplotlib()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.time()
    ctx = Context(args)
    build(ctx)
    # RLIMIT_NOFILE is per process: the server needs one descriptor per connection, each client process its share.
    if hard < ctx.settings.idle_connections + 200:
        ctx.settings.idle_connections = max(100, (hard - 200) // 1000 * 1000)
        log(f"RLIMIT_NOFILE hard limit is {hard}: using {ctx.settings.idle_connections} idle connections")

    wanted_systems = [s for s in args.systems.split(",") if s]
    wanted_scenarios = [s for s in args.scenarios.split(",") if s] or ALL_SCENARIOS
    systems: list[System] = []
    availability = {}
    for cls in SYSTEM_CLASSES + (ALT_CLASSES if ctx.alt_bin else []):
        system = cls(ctx)
        if wanted_systems and cls.key not in wanted_systems:
            continue
        if args.smoke and cls.key not in ("notifyd-c", "notifyd-swift", "notifyd-libnotifyd", "relay"):
            ok, reason = system.available()
            if ok:
                ok, reason = False, "not run by the smoke test"
        else:
            ok, reason = system.available()
        availability[cls.key] = {"label": cls.label, "available": ok, "reason": reason}
        if ok:
            systems.append(system)
        else:
            log(f"skipping {cls.label}: {reason}")

    # Systems that share a server process share one running instance.
    servers: dict[str, System] = {}
    try:
        for system in systems:
            if system.server in servers:
                owner = servers[system.server]
                system.address, system.pid = owner.address, owner.pid
                continue
            log(f"starting {system.server}")
            try:
                system.start()
                servers[system.server] = system
            except Exception as e:  # noqa: BLE001
                availability[system.key].update(available=False, reason=f"failed to start: {e}")
                log(f"cannot start {system.label}: {e}")
        systems = [s for s in systems if availability[s.key]["available"]]
        for system in systems:
            if system.server in servers and servers[system.server] is not system:
                owner = servers[system.server]
                system.address, system.pid = owner.address, owner.pid
                system.owner = owner

        def refresh():
            for system in systems:
                owner = servers.get(system.server)
                if owner is not None and owner is not system:
                    system.address, system.pid = owner.address, owner.pid

        results: dict = {}
        # The C client's decoder against protocol/vectors: the spec alone was enough to write it.
        vec = subprocess.run([str(ctx.vectors), str(ROOT / "protocol" / "vectors")], capture_output=True, text=True)
        results["protocol_vectors"] = {"ok": vec.returncode == 0, "summary": vec.stdout.strip(),
                                       "failures": vec.stderr.strip()[-2000:]}
        log(vec.stdout.strip())
        notifyd = servers.get("notifyd")
        def taking(scenario: str) -> list[System]:
            return [system for system in systems if system.runs(scenario)]

        plan = {
            "fanout": lambda: scenario_fanout(ctx, taking("fanout"), results),
            "rtt": lambda: scenario_rtt(ctx, taking("rtt"), results),
            "names": lambda: scenario_names(ctx, taking("names"), results),
            "patterns": lambda: scenario_patterns(ctx, taking("patterns"), results),
            "stopped": lambda: scenario_stopped(ctx, taking("stopped"), results),
            "connections": lambda: scenario_connections(ctx, taking("connections"), results),
            "inproc": lambda: scenario_inproc(ctx, notifyd, results),
            "allocations": lambda: scenario_allocations(ctx, notifyd, results),
            "unthrottled": lambda: scenario_unthrottled(ctx, taking("unthrottled"), results),
            "unthrottled_stopped": lambda: scenario_unthrottled_stopped(ctx, taking("unthrottled_stopped"), results),
            "hostile": lambda: scenario_hostile(ctx, taking("hostile"), results),
        }
        watch = LoadWatch()
        log(f"load average before the scenarios: {watch.before[0]:.2f} {watch.before[1]:.2f} {watch.before[2]:.2f}"
            + (f"; builds running: {', '.join(sorted(set(watch.before_competing)))}" if watch.before_competing else ""))
        for name in wanted_scenarios:
            refresh()
            plan[name]()
            refresh()
        load = watch.stop()
        if args.profile and notifyd is not None:
            refresh()
            scenario_profile(ctx, notifyd, results)
    finally:
        kill_all_children()
        for system in list(servers.values()):
            try:
                if isinstance(system, DbusBroker):
                    system.shutdown()
                else:
                    system.stop()
            except Exception:  # noqa: BLE001
                pass
        for system in systems:
            if isinstance(system, DbusBroker) and system not in servers.values():
                system.shutdown()

    data = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "mode": args.mode,
            "command": os.environ.get("BENCH_COMMAND") or " ".join(["python3", "Benchmarks/run.py", *sys.argv[1:]]),
            "duration_s": round(time.time() - started, 1),
            "machine": machine_info(),
            "versions": versions(ctx),
            "settings": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(ctx.settings).items()},
            "load": load,
        },
        "systems": availability,
        "results": results,
    }
    # A smoke run (debug build, tiny counts) makes no performance claims.
    data["targets"] = [] if args.smoke else evaluate_targets(results, {k: v["available"] for k, v in availability.items()})
    out_dir = Path(args.output) if args.output else (ctx.tmp / "results" if args.smoke else RESULTS)
    markdown, chart_error = publish(data, out_dir, smoke=args.smoke, into_benchmarks_md=not args.smoke and not args.output)
    print(markdown)
    log(f"{'smoke run finished' if args.smoke else f'results in {out_dir}'} ({time.time() - started:.0f} s)")
    failures = smoke_failures(data) if args.smoke else []
    if args.smoke and chart_error:
        failures.append(f"charts: {chart_error}")
    if not args.smoke:
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    if failures:
        for f in failures:
            print(f"bench-smoke: FAILED {f}", file=sys.stderr)
        print(f"bench-smoke: 0 passed, {len(failures)} failed")
        return 1
    if args.smoke:
        count = sum(len(v) if isinstance(v, list) else 1 for v in results.values())
        print(f"bench-smoke: {count} passed, 0 failed")
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    return 0


def smoke_failures(data: dict) -> list[str]:
    """The smoke test checks that every scenario ran and delivered everything, not how fast."""
    failures = []
    res = data["results"]
    for key in ("fanout", "rtt", "names", "patterns", "stopped", "connections", "inproc"):
        for r in res.get(key, []):
            who = f"{key} {r.get('system', '')} {r.get('target', '')}".strip()
            if "error" in r:
                failures.append(f"{who}: {r['error'][:300]}")
            elif key in ("fanout", "names", "patterns") and not r.get("complete"):
                failures.append(f"{who}: not everything was delivered ({r.get('delivered')} of {r.get('expected')})")
            elif key == "connections" and r.get("connections") != r.get("connections_requested"):
                failures.append(f"{who}: {r.get('connections')} connections")
    for r in res.get("unthrottled", []) + [x for e in res.get("unthrottled_stopped", []) for x in
                                          ([e] if e.get("error") else [dict(e["plain"], system=e["system"], policy="plain"),
                                                                       dict(e["stopped"], system=e["system"], policy="stopped")])]:
        who = f"unthrottled {r.get('system')} {r.get('policy', '')} S={r.get('subscribers', '')}"
        if r.get("error") or r.get("failed_runs"):
            failures.append(f"{who}: {(r.get('error') or (r.get('errors') or [''])[0])[:300]}")
        elif r.get("complete_runs") != r.get("runs"):
            failures.append(f"{who}: the end marker did not reach every subscriber")
        elif r.get("system") == "notifyd-c" and r.get("unaccounted_median"):
            failures.append(f"{who}: {r['unaccounted_median']} notifications neither delivered nor reported merged/dropped")
    # The hostile scenario: every round trip of the victim completed, idle, attacked and with every quota taken
    # (a daemon that a hostile user stalls leaves the victim's runs unfinished, which fails here).
    hostile = res.get("hostile") or {}
    if hostile.get("error"):
        failures.append(f"hostile: {hostile['error'][:300]}")
    for mode, entry in hostile.items():
        if isinstance(entry, dict) and "runs" in entry and (entry.get("failed_runs") or not entry.get("runs")):
            failures.append(f"hostile {mode}: {entry.get('failed_runs')} runs failed: {(entry.get('errors') or [''])[0][:300]}")
    for h in res.get("unthrottled_held", []):
        if h.get("error") or h.get("failed_runs"):
            failures.append(f"held path {h['policy']}: {str(h.get('error', 'a run failed'))[:300]}")
    vectors = res.get("protocol_vectors", {})
    if not vectors.get("ok"):
        failures.append(f"protocol vectors: {vectors.get('summary')} {vectors.get('failures', '')[:500]}")
    allocs = res.get("allocations", {})
    if "allocations" in res and not allocs.get("micro"):
        failures.append(f"allocations: micro-benchmark produced nothing ({allocs.get('micro_error', '')[:200]})")
    if allocs.get("daemon_error"):
        failures.append(f"allocations: {allocs['daemon_error'][:300]}")
    return failures


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        kill_all_children()
        sys.exit(130)
