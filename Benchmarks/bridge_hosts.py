#!/usr/bin/env python3
"""Hosts in network namespaces, each with its own nats-server (clustered over veths), notifyd and notifyd-bridge.

  bridge_hosts.py --check  the test (make test-bridge): a post on one host reaches every other host exactly once
                           with `>` exported and imported everywhere (every delivery counted: no loops); a NATS
                           server SIGKILLed and restarted mid-stream: the bridge reconnects, and every notification
                           is either delivered or counted as lost by the bridges (never silent).
  bridge_hosts.py --bench  the figures (make bench): host-to-host latency through notifyd -> bridge -> NATS ->
                           bridge -> notifyd next to NATS alone on the same hosts, and throughput through one bridge.

Needs root (ip netns), iproute2 and nats-server. Every process and namespace it makes is removed at the end.
"""
import argparse
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402

TIMEOUT = 60.0


def fail(message):
    print(f"FAIL: {message} (logs in /tmp/bridge-hosts-*)", flush=True)
    raise SystemExit(1)


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Topology:
    """Hosts h1..hN on a Linux bridge, 10.231.<k>.<i>/24, each in its own network namespace."""

    def __init__(self, count, directory):
        self.tag = f"nb{os.getpid() % 100000}"
        self.subnet = 10 + os.getpid() % 200
        self.hosts = [f"h{i + 1}" for i in range(count)]
        self.directory = directory
        self.processes = []
        self.bridge = f"{self.tag}br"
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "link", "set", self.bridge, "up")
        for index, host in enumerate(self.hosts):
            ns = self.namespace(host)
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", f"{self.tag}{index}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            run("ip", "link", "set", f"{self.tag}{index}", "master", self.bridge, "up")
            run("ip", "-n", ns, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def namespace(self, host):
        return f"{self.tag}{host}"

    def ip(self, host):
        return f"10.231.{self.subnet}.{self.hosts.index(host) + 1}"

    def socket_path(self, host):
        return os.path.join(self.directory, f"{host}.sock")

    def start(self, host, args, log):
        out = open(os.path.join(self.directory, log), "ab")
        process = subprocess.Popen(["ip", "netns", "exec", self.namespace(host)] + args, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        process.label = log.rsplit(".", 1)[0]  # ip netns exec execs the command: same pid
        self.processes.append(process)
        return process

    def cpu_seconds(self):
        """User + system CPU seconds of every running process, by label (h1-notifyd, h2-bridge, ...)."""
        ticks = os.sysconf("SC_CLK_TCK")
        result = {}
        for process in self.processes:
            try:
                fields = open(f"/proc/{process.pid}/stat").read().rsplit(")", 1)[1].split()
                result[process.label] = result.get(process.label, 0) + (int(fields[11]) + int(fields[12])) / ticks
            except (FileNotFoundError, ProcessLookupError):
                pass
        return result

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", self.namespace(host)], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "link", "del", self.bridge], stderr=subprocess.DEVNULL)

    def remove_directory(self):
        shutil.rmtree(self.directory, ignore_errors=True)


def wait_for_log(path, text, count=1, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, "r", errors="replace") as handle:
                if handle.read().count(text) >= count:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    fail(f"timed out waiting for {count} x '{text}' in {path}:\n" + open(path, errors="replace").read()[-3000:])


class Cluster:
    """One nats-server, notifyd and bridge per host; every bridge exports and imports `>`."""

    def __init__(self, topology, bin_dir, bridge_args=()):
        self.t = topology
        self.bin = bin_dir
        self.bridges = {}
        self.nats = {}
        self.bridge_args = list(bridge_args)
        for host in topology.hosts:
            self.start_nats(host)
        for host in topology.hosts[1:]:
            wait_for_log(self.log(host, "nats"), "Route connection created")
        for host in topology.hosts:
            topology.start(host, [f"{bin_dir}/notifyd", "--socket", topology.socket_path(host)], f"{host}-notifyd.log")
        for host in topology.hosts:
            wait_for_socket(topology.socket_path(host))
            self.start_bridge(host)
        for host in topology.hosts:
            wait_for_log(self.log(host, "bridge"), "bridge ready")

    def log(self, host, what):
        return os.path.join(self.t.directory, f"{host}-{what}.log")

    def start_nats(self, host):
        ip = self.t.ip(host)
        # h1 is the seed every other server routes to; the cluster's gossip connects the rest. (Listing every
        # server in every server's routes makes pairs dial each other at once and drop both routes as duplicates.)
        seed = self.t.hosts[0]
        routes = [] if host == seed else ["--routes", f"nats://{self.t.ip(seed)}:6222"]
        self.nats[host] = self.t.start(host, ["nats-server", "-a", ip, "-p", "4222", "--cluster_name", self.t.tag,
                                              "--cluster", f"nats://{ip}:6222"] + routes, f"{host}-nats.log")

    def start_bridge(self, host):
        # The host's own server first, then the others: a bridge fails over when its server dies.
        urls = [self.t.ip(host)] + [self.t.ip(other) for other in self.t.hosts if other != host]
        args = [f"{self.bin}/notifyd-bridge", "--socket", self.t.socket_path(host), "--export", ">", "--import", ">",
                "--host-id", host] + self.bridge_args
        for ip in urls:
            args += ["--nats", f"nats://{ip}:4222"]
        self.bridges[host] = self.t.start(host, args, f"{host}-bridge.log")

    def statistics(self, host):
        """The bridge's counters: SIGUSR1 makes it print them as one JSON line (into its log)."""
        path = self.log(host, "bridge")
        before = open(path, errors="replace").read().count('"imported"')
        self.bridges[host].send_signal(signal.SIGUSR1)
        wait_for_log(path, '"imported"', count=before + 1)
        lines = [line for line in open(path, errors="replace").read().splitlines() if line.startswith("{")]
        return json.loads(lines[-1])


def wait_for_socket(path, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.connect(path)
            probe.close()
            return
        except OSError:
            time.sleep(0.02)
    fail(f"no daemon on {path}")


class Client:
    """A raw protocol client of one host's daemon, subscribed to `>` with a large queue; counts what it receives."""

    def __init__(self, path, subscribe=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall(wire.hello(b"bridge-hosts", flags=1))  # with the origin of relayed posts
        self.origins = {}  # name -> [origin host or None]
        self.buffer = bytearray()
        self.received = {}  # name -> [payloads]
        self.order = []
        self.request = 0
        self.expect_type(0x81)
        if subscribe:
            self.sock.sendall(wire.subscribe(self.next_id(), 1, b">", policy=1, limit=65536))
            self.expect_type(0x82)

    def next_id(self):
        self.request += 1
        return self.request

    def expect_type(self, kind, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            for frame_kind, body in self.frames(deadline):
                if frame_kind == kind:
                    return body
                if frame_kind == 0x8F:
                    fail(f"daemon error {body.hex()}")
            if time.monotonic() > deadline:
                fail(f"timed out waiting for frame 0x{kind:02x}")

    def frames(self, deadline):
        """Reads what is there (waiting until deadline for something) and yields whole frames."""
        ready, _, _ = select.select([self.sock], [], [], max(0.0, min(0.2, deadline - time.monotonic())))
        if ready:
            data = self.sock.recv(1 << 20)
            if not data:
                fail("the daemon closed the connection")
            self.buffer += data
        offset = 0
        frames = []
        while True:
            parsed = wire.next_frame(self.buffer, offset)
            if parsed is None:
                break
            kind, body, offset = parsed
            if kind == 0x85:
                self.note(body)
            else:
                frames.append((kind, body))
        del self.buffer[:offset]
        return frames

    def note(self, body):
        sequence, pid, uid, gid, length = struct.unpack_from(">QIIIH", body, 0)
        name = body[22:22 + length].decode()
        (size,) = struct.unpack_from(">I", body, 22 + length)
        payload = body[26 + length:26 + length + size]
        rest = body[26 + length + size:]
        origin = rest[2:2 + struct.unpack_from(">H", rest, 0)[0]].decode() if rest else None
        self.received.setdefault(name, []).append(payload)
        self.origins.setdefault(name, []).append(origin)
        self.order.append((time.monotonic_ns(), name, payload))

    def pump(self, seconds=0.05):
        self.frames(time.monotonic() + seconds)

    def post(self, name, payload=b""):
        self.sock.sendall(wire.post(self.next_id(), name.encode(), payload))

    def wait_for(self, what, predicate, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                fail(f"timed out waiting for {what}")
            self.frames(deadline)


def wait_until_bridged(cluster, clients):
    """Posts probes from every host until each reaches every other host (subscriptions propagate through the cluster)."""
    for host, client in clients.items():
        for attempt in range(2000):
            name = f"probe.{host}.{attempt}"
            client.post(name)
            deadline = time.monotonic() + 0.1
            while time.monotonic() < deadline:
                for other in clients.values():
                    other.pump(0.01)
                if all(name in other.received for other in clients.values()):
                    break
            if all(name in other.received for other in clients.values()):
                break
        else:
            fail(f"posts on {host} never reached every host")


def check(args):
    directory = tempfile.mkdtemp(prefix="bridge-hosts-")
    topology = Topology(3, directory)
    try:
        cluster = Cluster(topology, args.bin)
        clients = {host: Client(topology.socket_path(host)) for host in topology.hosts}
        wait_until_bridged(cluster, clients)
        for client in clients.values():
            client.received.clear()

        # 1. Every host posts; every host receives every post exactly once.
        n = args.posts
        for host, client in clients.items():
            for i in range(n):
                client.post(f"mh.{host}.n{i}", f"{host}:{i}".encode())
        expected = {f"mh.{h}.n{i}" for h in topology.hosts for i in range(n)}
        for host, client in clients.items():
            client.wait_for(f"{len(expected)} names on {host}", lambda c=client: expected <= set(c.received))
        # A last round of markers: anything duplicated or looping would have arrived before them.
        for host, client in clients.items():
            client.post(f"mark.{host}")
        for host, client in clients.items():
            client.wait_for(f"markers on {host}",
                            lambda c=client: all(f"mark.{h}" in c.received for h in topology.hosts))
        for host, client in clients.items():
            names = [name for name in client.received if name.startswith("mh.")]
            duplicates = {name: len(p) for name, p in client.received.items() if len(p) != 1}
            if duplicates:
                fail(f"{host} received some notifications more than once: {list(duplicates.items())[:5]}")
            if set(names) != expected:
                fail(f"{host} received unexpected names: {sorted(set(names) ^ expected)[:5]}")
            for name, payloads in client.received.items():
                if name.startswith("mh.") and payloads[0] != f"{name.split('.')[1]}:{name.split('.n')[1]}".encode():
                    fail(f"{host}: payload of {name} changed: {payloads[0]!r}")
                if name.startswith("mh."):
                    poster = name.split(".")[1]
                    expected_origin = None if poster == host else poster
                    if client.origins[name][0] != expected_origin:
                        fail(f"{host}: {name} should come with origin {expected_origin}, "
                             f"came with {client.origins[name][0]}")
        for host in topology.hosts:
            stats = cluster.statistics(host)
            if stats["import_host_id_clash"] or stats["import_invalid_origin"]:
                fail(f"{host}: the bridges' origins were misread: {stats}")
            if stats["import_gaps"] or stats["export_dropped"] or stats["import_invalid_name"]:
                fail(f"{host}: nothing should be lost: {stats}")
        print(f"ok 1 - {n} posts on each of 3 hosts reached every host exactly once with their origin host; "
              f"no loops ({3 * len(expected)} deliveries counted)", flush=True)

        # 2. Kill h2's NATS server mid-stream, restart it: the bridge reconnects; nothing is lost silently.
        source, victim = clients["h1"], "h2"
        stream = args.stream
        before = {h: cluster.statistics(h) for h in topology.hosts}
        started = time.monotonic()
        for i in range(stream):
            if i == stream // 2:
                cluster.nats[victim].kill()
            source.post(f"st.n{i}", b"x" * 64)
            if i % 200 == 0:
                for client in clients.values():
                    client.pump(0)
                time.sleep(0.002)
        cluster.nats[victim].wait(timeout=10)
        cluster.start_nats(victim)
        wait_for_log(cluster.log(victim, "bridge"), "NATS: connected to", count=2)
        # Markers from h1 after the stream, until they arrive everywhere: losses before them show as gaps.
        deadline = time.monotonic() + TIMEOUT
        marker = 0
        while not all(any(n.startswith("stmark.") for n in c.received) for c in clients.values()):
            if time.monotonic() > deadline:
                fail("markers after the NATS restart never arrived everywhere")
            source.post(f"stmark.{marker}")
            marker += 1
            for client in clients.values():
                client.pump(0.05)
        elapsed = time.monotonic() - started
        after = {h: cluster.statistics(h) for h in topology.hosts}
        sent = stream
        # What h1's bridge itself dropped or lost (its outbox bound, a connection that closed under it).
        exporter_lost = sum(after["h1"][key] - before["h1"][key]
                            for key in ("export_dropped", "export_lost_in_flight", "export_too_large"))
        for host in ["h2", "h3"]:
            got = sum(1 for name in clients[host].received if name.startswith("st.n"))
            dup = [name for name, p in clients[host].received.items() if name.startswith("st.") and len(p) > 1]
            gaps = after[host]["import_gaps"] - before[host]["import_gaps"] + exporter_lost
            if dup:
                fail(f"{host}: duplicates after the restart: {dup[:5]}")
            if got + gaps < sent:
                fail(f"{host}: {sent - got} of {sent} lost but only {gaps} counted: {after[host]}")
            print(f"ok - {host}: {got} of {sent} delivered, {gaps} counted as lost "
                  f"(NATS on {victim} killed and restarted mid-stream; {elapsed:.1f} s)", flush=True)
        if after[victim]["nats_reconnects"] <= before[victim]["nats_reconnects"]:
            fail(f"{victim}'s bridge should have reconnected: {after[victim]}")
        print("ok 2 - a NATS server killed mid-stream: the bridge reconnected and every loss was counted", flush=True)
        topology.remove_directory()  # kept, with every process's log, when a check fails
    finally:
        topology.close()
    return 0


# ---------------------------------------------------------------------------------------------------------------
# --bench: latency and throughput

def percentile(sorted_values, fraction):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def summary(samples_ns):
    values = sorted(samples_ns)
    return {"count": len(values), "p50_us": percentile(values, 0.50) / 1000, "p99_us": percentile(values, 0.99) / 1000,
            "max_us": values[-1] / 1000 if values else float("nan")}


class RawNATS:
    """The least a NATS client can be (blocking socket, PUB and MSG): the 'NATS alone' side of the comparison."""

    def __init__(self, host, port=4222):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.readline()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nPING\r\n')
        while self.readline() != b"PONG":
            pass

    def readline(self):
        while b"\r\n" not in self.buffer:
            data = self.sock.recv(1 << 16)
            if not data:
                fail("NATS closed the connection")
            self.buffer += data
        line, _, rest = bytes(self.buffer).partition(b"\r\n")
        self.buffer = bytearray(rest)
        return line

    def messages(self):
        """Yields (subject, payload) forever."""
        while True:
            line = self.readline()
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
                continue
            if not line.startswith(b"MSG"):
                continue
            parts = line.split()
            size = int(parts[-1])
            while len(self.buffer) < size + 2:
                data = self.sock.recv(1 << 16)
                if not data:
                    fail("NATS closed the connection")
                self.buffer += data
            payload = bytes(self.buffer[:size])
            del self.buffer[:size + 2]
            yield parts[1].decode(), payload


def nats_role(args):
    """Run inside a host's namespace: `recv` subscribes and prints one latency per message; `send` publishes."""
    client = RawNATS(args.nats_host)
    if args.nats_role == "recv":
        client.sock.sendall(b"SUB lat.nats 1\r\nPING\r\n")
        print("ready", flush=True)
        out = []
        for _, payload in client.messages():
            now = time.monotonic_ns()
            (sent,) = struct.unpack_from(">Q", payload, 0)
            if sent == 0:
                break
            out.append(now - sent)
        print(json.dumps(out), flush=True)
    else:
        paced_send(lambda payload: client.sock.sendall(b"PUB lat.nats %d\r\n%s\r\n" % (len(payload), payload)),
                   args.count, args.rate)
        client.sock.sendall(b"PUB lat.nats 8\r\n" + struct.pack(">Q", 0) + b"\r\n")
    return 0


def paced_send(send, count, rate):
    """Open loop: message i goes out at start + i/rate whatever happened to the ones before."""
    start = time.monotonic_ns()
    interval = 1_000_000_000 // rate
    for i in range(count):
        due = start + i * interval
        wait = due - time.monotonic_ns()
        if wait > 0:
            time.sleep(wait / 1e9)  # sleeping, not spinning: a spinning sender takes a core from what it measures
        send(struct.pack(">Q", time.monotonic_ns()) + b"p" * 56)


def bridge_latency(topology, count, rate):
    """One-way latency h1 -> h2 through notifyd, the bridges and NATS (the hosts share one monotonic clock)."""
    receiver = Client(topology.socket_path("h2"), subscribe=False)
    receiver.sock.sendall(wire.subscribe(receiver.next_id(), 1, b"lat.bridge", policy=1, limit=65536))
    receiver.expect_type(0x82)
    sender = Client(topology.socket_path("h1"), subscribe=False)
    samples = []
    done = threading.Event()

    def receive():
        while not done.is_set() or len(samples) < count:
            before = len(receiver.order)
            receiver.pump(0.05)
            for stamp, _, payload in receiver.order[before:]:
                samples.append(stamp - struct.unpack_from(">Q", payload, 0)[0])
            if len(samples) >= count:
                return

    thread = threading.Thread(target=receive)
    thread.start()
    paced_send(lambda payload: sender.post("lat.bridge", payload), count, rate)
    done.set()
    thread.join(timeout=TIMEOUT)
    return samples


def local_round_trip(topology, count):
    """A post and its delivery back to the poster through one notifyd (the 'one local round trip' of the target)."""
    client = Client(topology.socket_path("h1"), subscribe=False)
    client.sock.sendall(wire.subscribe(client.next_id(), 1, b"lat.local", policy=1, limit=65536))
    client.expect_type(0x82)
    samples = []
    for _ in range(count):
        before = len(client.order)
        sent = time.monotonic_ns()
        client.post("lat.local", b"x" * 64)
        while len(client.order) == before:
            client.pump(1.0)
        samples.append(client.order[before][0] - sent)
    return samples


def nats_latency(topology, count, rate, script):
    receiver = subprocess.Popen(["ip", "netns", "exec", topology.namespace("h2"), sys.executable, script,
                                 "--nats-role", "recv", "--nats-host", topology.ip("h2")], stdout=subprocess.PIPE,
                                text=True)
    if receiver.stdout.readline().strip() != "ready":
        fail("the NATS receiver did not start")
    time.sleep(0.5)  # interest propagation over the route; the warm-up below absorbs any rest
    subprocess.run(["ip", "netns", "exec", topology.namespace("h1"), sys.executable, script, "--nats-role", "send",
                    "--nats-host", topology.ip("h1"), "--count", str(count), "--rate", str(rate)], check=True)
    out, _ = receiver.communicate(timeout=TIMEOUT)
    return json.loads(out.strip().splitlines()[-1])


def throughput(topology, rate, seconds):
    """Posts on h1 at `rate` a second for `seconds` (batches every 10 ms) and counts what reaches h2, until all
    arrived or nothing came for 5 s. Returns (sent, received, seconds from the first post to the last delivery)."""
    receiver = Client(topology.socket_path("h2"), subscribe=False)
    receiver.sock.sendall(wire.subscribe(receiver.next_id(), 1, b"tp.>", policy=1, limit=1_000_000))
    receiver.expect_type(0x82)
    batch = max(1, rate // 100)
    frames = b"".join(wire.post(0, f"tp.n{i % 100}".encode(), b"x" * 64) for i in range(batch))
    batches = int(seconds * 100)
    count = batch * batches
    sender = Client(topology.socket_path("h1"), subscribe=False)
    received = 0
    last = [time.monotonic()]

    def count_frames():
        nonlocal received
        buffer = bytearray()
        receiver.sock.setblocking(False)
        while received < count and time.monotonic() - last[0] < 5:
            ready, _, _ = select.select([receiver.sock], [], [], 0.2)
            if not ready:
                continue
            buffer += receiver.sock.recv(1 << 20)
            offset = 0
            while len(buffer) - offset >= 4:
                (length,) = struct.unpack_from(">I", buffer, offset)
                if len(buffer) - offset < 4 + length:
                    break
                if buffer[offset + 4] == 0x85:
                    received += 1
                offset += 4 + length
            del buffer[:offset]
            last[0] = time.monotonic()

    thread = threading.Thread(target=count_frames)
    thread.start()
    started = time.monotonic()
    for index in range(batches):
        wait = started + index / 100 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        sender.sock.sendall(frames)
    thread.join()
    return count, received, last[0] - started


def bench(args):
    directory = tempfile.mkdtemp(prefix="bridge-hosts-")
    topology = Topology(2, directory)
    results = {}
    try:
        cluster = Cluster(topology, args.bin, bridge_args=["--queue-limit", "1000000", "--max-pending-bytes",
                                                           str(256 << 20)])
        clients = {host: Client(topology.socket_path(host)) for host in topology.hosts}
        wait_until_bridged(cluster, clients)
        for client in clients.values():
            client.sock.close()
        script = os.path.abspath(__file__)
        for run in range(args.runs):
            bridge_latency(topology, 500, args.rate)  # warm-up
            results.setdefault("bridge", []).append(summary(bridge_latency(topology, args.count, args.rate)))
            nats_latency(topology, 500, args.rate, script)
            results.setdefault("nats", []).append(summary(nats_latency(topology, args.count, args.rate, script)))
            results.setdefault("local_rtt", []).append(summary(local_round_trip(topology, 2000)))
        for run in range(args.runs):
            for rate in args.rates:
                cpu_before = topology.cpu_seconds()
                sent, received, elapsed = throughput(topology, rate, 2.0)
                cpu = {label: round(value - cpu_before.get(label, 0), 2)
                       for label, value in topology.cpu_seconds().items()}
                results.setdefault("throughput", []).append({"offered_per_second": rate, "sent": sent,
                                                             "received": received, "seconds": elapsed,
                                                             "per_second": received / elapsed, "cpu_seconds": cpu})
        results["statistics"] = {host: cluster.statistics(host) for host in topology.hosts}
        topology.remove_directory()
    finally:
        topology.close()
    print(json.dumps(results, indent=1))
    for run in range(args.runs):
        b, n, l = results["bridge"][run], results["nats"][run], results["local_rtt"][run]
        bound = 2 * n["p99_us"] + l["p99_us"]
        print(f"run {run + 1}: bridge p50 {b['p50_us']:.0f} us p99 {b['p99_us']:.0f} us | NATS alone p50 "
              f"{n['p50_us']:.0f} us p99 {n['p99_us']:.0f} us | local round trip p99 {l['p99_us']:.0f} us | "
              f"target p99 < 2000 us and <= 2 x NATS + local = {bound:.0f} us: "
              f"{'met' if b['p99_us'] < 2000 and b['p99_us'] <= bound else 'MISSED'}")
    for t in results["throughput"]:
        lossless = t["received"] == t["sent"]
        print(f"throughput offered {t['offered_per_second']:,}/s: {t['received']} of {t['sent']} in {t['seconds']:.2f} s"
              f" = {t['per_second']:,.0f}/s{'' if lossless else ' (LOST SOME)'}; CPU s: {t['cpu_seconds']}")
    best = max((t["per_second"] for t in results["throughput"] if t["received"] == t["sent"]), default=0)
    print(f"throughput through one bridge, lossless: {best:,.0f}/s (target >= 100,000/s: "
          f"{'met' if best >= 100_000 else 'MISSED'})")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", ".build", "debug"))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--posts", type=int, default=300, help="posts per host in the exactly-once check")
    parser.add_argument("--stream", type=int, default=5000, help="posts in the NATS-restart check")
    parser.add_argument("--runs", type=int, default=3, help="bench: runs of each measurement")
    parser.add_argument("--count", type=int, default=3000, help="bench: latency samples per run")
    parser.add_argument("--rate", type=int, default=1000, help="bench: latency messages per second")
    parser.add_argument("--rates", type=int, nargs="+", default=[50_000, 100_000, 150_000],
                        help="bench: offered posts per second of the throughput runs (2 s each)")
    parser.add_argument("--nats-role", choices=["send", "recv"], help=argparse.SUPPRESS)
    parser.add_argument("--nats-host", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nats_role:
        return nats_role(args)
    args.bin = os.path.abspath(args.bin)
    if os.geteuid() != 0:
        fail("needs root (ip netns)")
    if args.check:
        return check(args)
    if args.bench:
        return bench(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
