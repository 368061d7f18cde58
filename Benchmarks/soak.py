#!/usr/bin/env python3
"""Issue 15's soak, modelled on Darwin Libnotify's random test: many clients doing random operations against one
notifyd, then every connection-bound table must be back at its baseline and the daemon's memory must not grow.

usage: soak.py NOTIFYD [--clients N] [--operations N] [--rounds N] [--stoppable N] [--seed N] [--json FILE]
       [--rss-limit F]

Starts NOTIFYD on a private socket. Each round opens N clients (one Python process, non-blocking sockets that it
drains as it goes, so the daemon never waits on it) plus STOPPABLE subscriber processes that it SIGSTOPs and
SIGCONTs, performs its share of OPERATIONS random operations (subscribe to exact names and patterns under every
policy, unsubscribe, post, suspend, resume, set and get state, disconnect and reconnect, stop and continue a
subscriber process), then continues every process, closes every client and waits (on `status`, not on time) until
the daemon has one connection left: its own. It fails (exit 1) unless, after the last round,
  - subscriptions, subscribed names, patterns, outbound and held bytes are 0 and no client is left;
  - state names are at most the distinct names it set;
  - the daemon's resident memory at the end is within RSS_LIMIT (10%) of what it was at the start, with every
    client connected (it reports the figure after each round as well).
Prints one JSON line with the figures."""
import argparse, json, os, random, resource, selectors, signal, socket, struct, subprocess, sys, tempfile, time

from wire import frame, hello, s16

parser = argparse.ArgumentParser()
parser.add_argument("notifyd")
parser.add_argument("--clients", type=int, default=1000)
parser.add_argument("--operations", type=int, default=1_000_000)
parser.add_argument("--stoppable", type=int, default=16)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--rounds", type=int, default=4,
                    help="the operations are split into this many rounds, each opening and closing every client")
parser.add_argument("--json", default=None)
parser.add_argument("--rss-limit", type=float, default=0.10,
                    help="the largest growth of resident memory allowed (0.10: 10%%); a negative value checks none "
                         "(a short run in a debug build, where the tables are what is checked)")
args = parser.parse_args()
rng = random.Random(args.seed)
# One descriptor per client, here and in the daemon (which raises its own soft limit).
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


NAMES = [f"soak.n{i}".encode() for i in range(2000)]
PATTERNS = [b"soak.*", b"soak.>", b"*.n1", b"soak.n1*"] + [f"soak.n{i}".encode() for i in range(0, 2000, 97)]
PATTERNS = [p for p in PATTERNS if b"*" in p or b">" in p] + [b"soak.n7.>", b"*.*"]


class Client:
    """One connection: queued bytes it could not send yet, its subscription ids, whether suspended."""

    def __init__(self, path, index):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.out = bytearray(hello(f"soak-{index}".encode()))
        self.subscriptions = []
        self.next_id = 1
        self.suspended = 0

    def request_id(self):
        self.next_id += 1
        return self.next_id

    def send(self, data):
        self.out += data

    def pump(self):
        """Sends what it can and reads (and discards) what there is; False once the daemon closed it."""
        try:
            while self.out:
                n = self.sock.send(self.out)
                del self.out[:n]
        except BlockingIOError:
            pass
        except (BrokenPipeError, ConnectionResetError):
            return False
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return False
        except BlockingIOError:
            return True
        except ConnectionResetError:
            return False


def query_status(path):
    daemon_died()
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.settimeout(30)
    # QUERY only once WELCOME is read, so the status does not count the WELCOME still queued for this connection.
    sock.sendall(hello(b"soak-status"))
    buffer = b""
    while True:
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            n = struct.unpack(">I", buffer[:4])[0]
            body, buffer = buffer[4:4 + n], buffer[4 + n:]
            if body[0] == 0x81:
                sock.sendall(frame(0x0A, struct.pack(">IB", 7, 1) + s16(b"")))
            if body[0] == 0x8B:
                length = struct.unpack(">I", body[5:9])[0]
                sock.close()
                return json.loads(body[9:9 + length])
        try:
            data = sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            time.sleep(0.5)
            daemon_died()
            raise SystemExit("the daemon closed the status connection")
        buffer += data


STOPPABLE_CODE = r"""
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
from wire import frame, hello, s16
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(hello(b"stop"))
for i, (p, policy, limit) in enumerate([(b"soak.>", 0, 0), (b"soak.*", 1, 1000), (b"soak.n1", 1, 4294967295)]):
    s.sendall(frame(2, struct.pack(">IIBBI", i + 1, i + 1, 0, policy, limit) + s16(p)))
while s.recv(1 << 16):
    pass
"""

workdir = tempfile.mkdtemp(prefix="notifyd-soak-")
path = os.path.join(workdir, "notifyd.sock")
daemon_log = open(os.path.join(workdir, "notifyd.log"), "wb")
daemon = subprocess.Popen([args.notifyd, "--socket", path, "--log-level", "error"], stderr=daemon_log)


def daemon_died():
    """Exits with the daemon's last log lines if it is no longer running."""
    if daemon.poll() is None:
        return
    daemon_log.flush()
    with open(daemon_log.name, "rb") as f:
        tail = f.read()[-4000:].decode(errors="replace")
    raise SystemExit(f"notifyd exited with status {daemon.returncode} during the soak:\n{tail}")

deadline = time.monotonic() + 30
while not os.path.exists(path):
    if time.monotonic() > deadline or daemon.poll() is not None:
        raise SystemExit("notifyd did not start")
    time.sleep(0.02)

counts = {}
states = set()
reconnects = 0
closed_by_daemon = 0
operations_seconds = 0.0


def soak_round(operations):
    """Opens every client and stoppable process, runs `operations` random operations, closes them all and waits
    until the daemon has only the status connection left. Returns the status with clients connected (before the
    operations) and the status after, once the daemon had a quiet moment to hand freed memory back."""
    global clients, selector, pending, reconnects, closed_by_daemon, operations_seconds
    here = os.path.dirname(os.path.abspath(__file__))
    stoppable = [subprocess.Popen([sys.executable, "-c", STOPPABLE_CODE, path, here]) for _ in range(args.stoppable)]
    stopped = set()
    clients = [Client(path, i) for i in range(args.clients)]
    for c in clients:
        c.pump()
    deadline = time.monotonic() + 60
    while query_status(path)["connections"] < args.clients + args.stoppable + 1:
        if time.monotonic() > deadline:
            raise SystemExit("the clients did not all connect")
        for c in clients:
            c.pump()
    # The daemon samples its resident memory once a second: without this wait, the baseline is a sample from
    # before the clients connected (8 MB less).
    time.sleep(1.5)
    connected = query_status(path)
    selector = selectors.DefaultSelector()
    for k, c in enumerate(clients):
        selector.register(c.sock, selectors.EVENT_READ, k)
    pending = set()
    start = time.monotonic()
    for op in range(operations):
        i = rng.randrange(len(clients))
        c = clients[i]
        kind = rng.choices(
            ["subscribe", "unsubscribe", "post", "suspend", "resume", "set_state", "get_state", "reconnect", "signal"],
            weights=[20, 10, 45, 3, 3, 5, 5, 2, 1])[0]
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "subscribe":
            sid = c.request_id()
            pattern = rng.choice(NAMES) if rng.random() < 0.7 else rng.choice(PATTERNS)
            policy, limit = rng.choice([(0, 0), (1, 100), (1, 100000), (2, 0)])
            c.send(frame(0x02, struct.pack(">IIBBI", sid, sid, 0, policy, limit) + s16(pattern)))
            c.subscriptions.append(sid)
        elif kind == "unsubscribe" and c.subscriptions:
            sid = c.subscriptions.pop(rng.randrange(len(c.subscriptions)))
            c.send(frame(0x03, struct.pack(">II", c.request_id(), sid)))
        elif kind == "post":
            payload = b"x" * rng.choice([0, 16, 64, 1024])
            c.send(frame(0x04, struct.pack(">IB", 0, 0) + s16(rng.choice(NAMES)) + struct.pack(">I", len(payload))
                         + payload))
        elif kind == "suspend" and c.suspended < 3:
            c.suspended += 1
            c.send(frame(0x08, struct.pack(">I", c.request_id())))
        elif kind == "resume" and c.suspended:
            c.suspended -= 1
            c.send(frame(0x09, struct.pack(">I", c.request_id())))
        elif kind == "set_state":
            name = rng.choice(NAMES[:200])
            states.add(name)
            c.send(frame(0x06, struct.pack(">IQ", c.request_id(), rng.randrange(1 << 32)) + s16(name)))
        elif kind == "get_state":
            c.send(frame(0x07, struct.pack(">I", c.request_id()) + s16(rng.choice(NAMES))))
        elif kind == "reconnect":
            replace(i)
            reconnects += 1
        elif kind == "signal" and stoppable:
            p = rng.choice(stoppable)
            if p.pid in stopped:
                p.send_signal(signal.SIGCONT)
                stopped.discard(p.pid)
            else:
                p.send_signal(signal.SIGSTOP)
                stopped.add(p.pid)
        if clients[i].out:
            pending.add(i)
        if op % 64 == 63:
            # Drain what the daemon sent (only sockets with something to read) and send what waits.
            for key, _ in selector.select(0):
                pending.add(key.data)
            for k in list(pending):
                pending.discard(k)
                other = clients[k]
                if not other.pump():
                    # A `disconnect` subscriber the daemon closed (it could not keep up): reconnect it.
                    replace(k)
                    closed_by_daemon += 1
                elif other.out:
                    pending.add(k)
    operations_seconds += time.monotonic() - start

    for p in stoppable:
        p.send_signal(signal.SIGCONT)
    for c in clients:
        c.pump()
        c.sock.close()
    selector.close()
    for p in stoppable:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 60
    while query_status(path)["connections"] != 1:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # The daemon hands freed memory back in its first quiet second; RSS is sampled once a second.
    time.sleep(float(os.environ.get("SOAK_SETTLE", "2.5")))
    return connected, query_status(path)


def replace(k):
    """Closes client k and opens a new one in its place."""
    selector.unregister(clients[k].sock)
    clients[k].sock.close()
    clients[k] = Client(path, k)
    selector.register(clients[k].sock, selectors.EVENT_READ, k)
    pending.add(k)


rounds = []
for number in range(args.rounds):
    share = args.operations // args.rounds + (1 if number < args.operations % args.rounds else 0)
    rounds.append(soak_round(share))
baseline = rounds[0][0]
first_after = rounds[0][1]
status = rounds[-1][1]
daemon.terminate()
daemon.wait(timeout=30)

problems = []
for key in ("subscriptions", "subscribed_names", "patterns", "outbound_bytes", "held_bytes"):
    if status.get(key, 0) != 0:
        problems.append(f"{key} is {status[key]} after every client left (expected 0)")
if status["connections"] != 1:
    problems.append(f"{status['connections'] - 1} connections left besides the status query")
if status["state_names"] > len(states):
    problems.append(f"{status['state_names']} state names, more than the {len(states)} set")
# Memory: after the last round, every client gone, against the start of the first, every client connected (the
# issue's criterion). Each round's figure is reported too: growth that levels off is the allocator keeping what a
# peak left fragmented, growth that goes on with every round is a leak.
growth = status["resident_memory_bytes"] / max(1, baseline["resident_memory_bytes"]) - 1
if args.rss_limit >= 0 and growth > args.rss_limit:
    problems.append(f"resident memory grew {growth:.0%} from the start, every client connected, to the end, every "
                    f"client gone ({baseline['resident_memory_bytes']} B, then {status['resident_memory_bytes']} B; "
                    f"after each round: {[after['resident_memory_bytes'] for _, after in rounds]}); at most "
                    f"{args.rss_limit:.0%} allowed")
result = {
    "clients": args.clients, "stoppable": args.stoppable, "operations": args.operations, "seed": args.seed,
    "operations_per_second": round(args.operations / operations_seconds), "counts": counts,
    "reconnects": reconnects, "closed_by_daemon": closed_by_daemon, "posts_by_daemon": status["posts"],
    "deliveries": status["deliveries"], "dropped": status["dropped"], "merged": status["merged"],
    "slow_consumer_disconnects": status["slow_consumer_disconnects"],
    "rounds": args.rounds, "rss_connected_bytes": baseline["resident_memory_bytes"],
    "rss_after_each_round_bytes": [after["resident_memory_bytes"] for _, after in rounds],
    "rss_growth": round(growth, 3), "tables_after": {k: status[k] for k in (
        "connections", "subscriptions", "subscribed_names", "patterns", "state_names", "retained_names",
        "outbound_bytes", "held_bytes")},
    "problems": problems,
}
print(json.dumps(result))
if args.json:
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
sys.exit(1 if problems else 0)
