#!/usr/bin/env python3
"""Checks that a daemon restart is a hand-over (protocol/PROTOCOL.md § 15) under load, and measures its gap.

CLIENTS connections in this process (epoll), each with K subscriptions: `gap.tick` with queue(1000000) and a mix of
exact names, `*` and `>` patterns under every policy. SUSPENDED of them are suspended before the ticks and resumed
after the restart. STOPPED more live in a child process that is SIGSTOPped before the ticks and continued after the
restart; they also subscribe to `gapf.fill`, which gets 360 KB of posts before the first tick, so that the daemon
surely owes them bytes (a frame cut mid-write among them) across the hand-over. One poster, connected first (the
successor adopts connections in connection order; --poster-last: after every subscriber), posts only `gap.tick`
(ack wanted, an 8-byte counter) at RATE/s through WARMUP seconds, the restart, and AFTER seconds more. It fails
(exit 1, naming each failure) unless:
  - no connection sees EOF, GOODBYE, ERROR, OVERFLOW or any frame it did not ask for;
  - every client gets every acknowledged tick once, in order, as the exact bytes of its NOTIFICATION (the sequence
    number of its POSTED, counters 0..n-1), and after the last one nothing but the PONG of a PING;
  - the POSTED sequence numbers are consecutive, and each tick reached every subscriber (delivered_count);
  - QUERY status (instance id, counts), clients (each connection number's client name, pid, subscriptions,
    suspension), names (exact subscribers, state values, retained flags) and the RETAINED frames are the same
    before and after, and the daemon's pid changed.
The gap: per subscriber (neither suspended nor stopped), the longest interval between two tick receptions that
overlaps the restart window (command started .. old daemon gone); p50/p99/max in ms, beside the same figure for
the steady state before, and the worst tick latency (post to reception) in both windows.

usage: restart_gap.py (--notifyd BIN | --socket PATH --restart-command CMD) [--clients N]
       [--subscriptions-per-client K] [--rate R] [--suspended X] [--stopped Y] [--warmup S] [--after S]
       [--json OUT] [--poster-last]
--notifyd starts BIN on a socket in a temporary directory, restarts it with `BIN --socket PATH --replace` (or
--restart-command) and stops the last daemon with SIGTERM. The restart command runs in sh with NOTIFYD_SOCKET and
NOTIFYD_PID (the running daemon) set, and NOTIFYD_BIN and NOTIFYD_CONFIG with --notifyd; it must return."""
import argparse, array, bisect, json, math, os, resource, selectors, signal, socket, struct, subprocess, sys
import tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wire import bare, hello, next_frame, notification, post, query, s16, set_state, subscribe, unsubscribe

TICK, FILL = b"gap.tick", b"gapf.fill"  # no filler pattern matches gapf.fill
TICK_LEN = len(notification(0, 0, 0, 0, TICK, bytes(8)))  # 47: every tick frame has the same length
FILLS = [bytes([65 + i]) * 60000 for i in range(6)]       # more than a socket buffer takes
PING_ID, RESUME_ID, SETUP_ID = 0xFFFFFFF0, 0xFFFFFFF1, 0x7FFF0000
PROGRESS_TIMEOUT = 60.0  # seconds without any traffic before a wait fails


class Failure(Exception):
    pass


class Expect:
    """What the clients must receive. The daemon encodes a post once for all its recipients, so one reference byte
    stream of the acknowledged ticks (and one of the fills, for the stopped clients) serves every client."""
    def __init__(self):
        self.seqs, self.stream, self.fill, self.fill_seqs = [], bytearray(), b"", []
        self.creds, self.final, self.ready = (0, 0, 0), None, True

    def add(self, seq):
        self.stream += notification(seq, *self.creds, TICK, struct.pack(">Q", len(self.seqs)))
        self.seqs.append(seq)

    def add_fill(self, seq):
        self.fill += notification(seq, *self.creds, FILL, FILLS[len(self.fill_seqs)])
        self.fill_seqs.append(seq)


EXPECT, WAITING = Expect(), set()  # WAITING: clients holding bytes past the last acknowledged tick
PROGRESS = [0]  # bumped by client and poster traffic: what the timeouts watch


def connect(path, name):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)  # a daemon that does not accept fails loudly rather than hanging the tool
    deadline = time.monotonic() + 30
    while True:
        try:
            s.connect(path)
            break
        except BlockingIOError:  # the listen backlog is full (thousands of connections at once): try again
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)
    s.sendall(hello(name))
    return s


def recv(sock, size):
    """What the socket has (b"" at its end), or None if nothing yet."""
    try:
        data = sock.recv(size)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        data = b""
    PROGRESS[0] += 1
    return data


def filler(index, k):
    """The K-1 subscriptions besides gap.tick. Those matching gap.tick (`gap.*`) have a weaker policy than its
    queue(1000000), which so stays the strongest: a `disconnect` one would win, and, held like queue(1000) while
    suspended, drop ticks."""
    out = b""
    for j in range(2, k + 1):
        m = (index + j) % 6
        name = [b"gap.c%d.n%d" % (index, j), b"gap.shared.n%d" % (j % 50), b"gap.c%d.*.p%d" % (index, j),
                b"gap.c%d.n%d.>" % (index, j), b"*.shared.>", b"gap.*"][m]
        policy, limit = [(0, 0), (1, 10 * j), (2, 0)][(index * 7 + j) % 3] if m != 5 else [(0, 0), (1, 100)][j % 2]
        out += subscribe(j, j, name, policy, limit)
    return out


class Client:
    """A subscriber. Checks its stream against EXPECT: runs of ticks by one comparison of bytes (parsing a million
    ticks a second in Python would not keep up), frame by frame wherever that comparison fails."""
    def __init__(self, loop, path, name, index, k, suspend=False, timed=False, fill=False):
        self.name, self.suspend, self.timed, self.fill, self.loop = name, suspend, timed, fill, loop
        self.sock = connect(path, name)
        self.sock.sendall(subscribe(1, 1, TICK, 1, 1000000) + filler(index, k) + (
            subscribe(k + 1, k + 1, FILL, 1, 1000) if fill else b"") + (bare(0x08, k + 2) if suspend else b""))
        self.sock.setblocking(False)
        self.replies_due = 1 + k + fill + suspend  # WELCOME, an OK per SUBSCRIBE and for the SUSPEND
        self.buf, self.next, self.fill_pos, self.stream_bytes, self.last_count = bytearray(), 0, 0, 0, 0
        self.times, self.counts = array.array("d"), array.array("q")  # receptions that completed ticks
        self.errors, self.error_count = [], 0
        self.eof = self.goodbye = self.resumed = self.pinged = self.done = self.broken = False
        loop.add(self.sock, self.on_readable)

    def error(self, text):
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(text)

    def on_readable(self, now):
        data = recv(self.sock, 1 << 18)
        if data == b"":
            self.eof = True
            self.loop.remove(self.sock)
            self.sock.close()
        elif data:
            if self.replies_due == 0 and self.timed:
                # Past the setup every byte is a tick's: the ticks a reception completes follow from the count.
                self.stream_bytes += len(data)
                if self.stream_bytes // TICK_LEN != self.last_count:
                    self.last_count = self.stream_bytes // TICK_LEN
                    self.times.append(now)
                    self.counts.append(self.last_count)
            self.buf += data
            self.process()

    def process(self):
        if self.broken:
            return
        buf, pos, fill = self.buf, 0, EXPECT.fill if self.fill else b""
        fast = not (self.suspend and not self.resumed)  # a suspended client must not get a tick at all
        try:
            while pos < len(buf):
                if self.replies_due == 0 and not EXPECT.ready:
                    break  # the stopped child, before it knows what to expect
                if self.replies_due == 0 and self.fill_pos < len(fill):
                    n = min(len(buf) - pos, len(fill) - self.fill_pos)
                    if buf[pos:pos + n] != fill[self.fill_pos:self.fill_pos + n]:
                        raise ValueError(f"the gapf.fill notifications differ from their posts at byte {self.fill_pos}")
                    pos, self.fill_pos = pos + n, self.fill_pos + n
                    continue
                if self.replies_due == 0 and fast and not self.done:
                    ref = self.next * TICK_LEN
                    n = min(len(buf) - pos, len(EXPECT.stream) - ref)
                    n -= n % TICK_LEN
                    if n > 0 and buf[pos:pos + n] == EXPECT.stream[ref:ref + n]:
                        pos, self.next = pos + n, self.next + n // TICK_LEN
                        continue
                    fast = False  # a different frame in this run: frame by frame for the rest of this buffer
                got = next_frame(buf, pos)
                if got is None or not self.frame(*got[:2]):
                    break
                pos = got[2]
        except ValueError as e:  # the stream cannot be followed any further
            self.error(str(e))
            self.broken, pos = True, len(buf)
        del buf[:pos]
        (WAITING.add if buf and not self.eof else WAITING.discard)(self)
        if EXPECT.final is not None and self.next >= EXPECT.final and not (self.pinged or self.eof or self.broken) \
                and self.replies_due == 0 and (self.resumed or not self.suspend):
            # Every tick is in: the PONG of a PING shows that nothing else (a late duplicate) was on its way.
            self.pinged = True
            try:
                self.sock.send(bare(0x05, PING_ID))
            except OSError as e:
                self.error(f"cannot send the last PING: {e}")

    def frame(self, kind, body):
        """Checks one frame; False to keep it until its tick is acknowledged."""
        if self.replies_due and kind in (0x81, 0x82):
            self.replies_due -= 1
        elif not self.replies_due and kind == 0x85 and len(body) == TICK_LEN - 5 and body[20:30] == s16(TICK):
            k = struct.unpack_from(">Q", body, 34)[0]
            if k >= len(EXPECT.seqs) and k >= self.next:
                return False
            if self.suspend and not self.resumed:
                self.error(f"tick {k} delivered while suspended")
            if k < self.next:
                self.error(f"tick {k} again after tick {self.next - 1} (a duplicate, or out of order)")
                return True
            if k > self.next:
                self.error(f"ticks {self.next}..{k - 1} missing (got tick {k})")
            if body != EXPECT.stream[k * TICK_LEN + 5:(k + 1) * TICK_LEN]:
                seq, pid, uid, gid = struct.unpack_from(">QIII", body)
                self.error(f"tick {k}: sequence {seq}, sender {pid}/{uid}/{gid}; expected sequence "
                           f"{EXPECT.seqs[k]}, sender {'/'.join(map(str, EXPECT.creds))}")
            self.next = k + 1
        elif kind == 0x82 and body[:4] == struct.pack(">I", RESUME_ID) and self.suspend and not self.resumed:
            self.resumed = True
        elif kind == 0x84 and body[:4] == struct.pack(">I", PING_ID) and self.pinged and not self.done:
            self.done = True
        elif kind == 0x88:
            self.goodbye = True
            self.error("GOODBYE: " + body[6:].decode(errors="replace"))
        elif kind == 0x8F:
            self.error(f"ERROR {struct.unpack_from('>H', body, 4)[0]}: " + body[9:].decode(errors="replace"))
        elif kind == 0x86:
            self.error("OVERFLOW: subscription %d dropped %d" % struct.unpack_from(">IQ", body))
        else:
            self.error(f"unexpected frame 0x{kind:02x} ({len(body)} bytes){' after the PONG' if self.done else ''}")
        return True

    def finished(self):
        return self.done or self.eof or self.broken

    def report(self):
        if not self.done and EXPECT.final is not None and self.next < EXPECT.final:
            self.error(f"ticks {self.next}..{EXPECT.final - 1} never arrived")
        return {"name": self.name.decode(), "ticks": self.next, "eof": self.eof, "goodbye": self.goodbye,
                "done": self.done, "unchecked_bytes": len(self.buf), "error_count": self.error_count,
                "errors": self.errors}


class Loop:
    """Dispatches readable descriptors; `first` handlers run before the others (the poster's: clients then find
    the ticks they have just received acknowledged)."""
    def __init__(self):
        self.sel, self.first = selectors.DefaultSelector(), set()

    def add(self, fileobj, handler, first=False):
        self.sel.register(fileobj, selectors.EVENT_READ, handler)
        if first:
            self.first.add(fileobj)

    def remove(self, fileobj):
        self.sel.unregister(fileobj)
        self.first.discard(fileobj)

    def run(self, done, what, timeout=PROGRESS_TIMEOUT, hook=None, absolute=False):
        """Until done(); fails after `timeout` s without traffic (or at all, if `absolute`)."""
        last, deadline = PROGRESS[0], time.monotonic() + timeout
        while not done():
            wait = hook(time.monotonic()) if hook else 0.05
            events = self.sel.select(max(0.0, min(wait, 0.05)))
            now = time.monotonic()
            for key, _ in sorted(events, key=lambda e: e[0].fileobj not in self.first):
                if key.fileobj in self.sel.get_map():  # an earlier handler may have removed it
                    key.data(now)
            if PROGRESS[0] != last and not absolute:
                last, deadline = PROGRESS[0], now + timeout
            elif now > deadline:
                raise Failure(f"timed out after {timeout:.0f} s{'' if absolute else ' without traffic'} "
                              f"waiting for {what}")


class Poster:
    """Sets states and retains posts (to compare before and after), posts the fills, then gap.tick at the rate;
    checks every POSTED."""
    STATES = [(b"gaps.zero", 0), (b"gaps.max", 2 ** 64 - 1), (b"gaps.big", 2 ** 53 + 1), (b"gaps.answer", 42)]
    RETAINED = [(b"gapr.r0", b"first"), (b"gapr.r1", b"x" * 300), (b"gapr.r0", b"replaced"), (b"gapr.r2", b"")]

    def __init__(self, loop, path, subscribers, stopped):
        self.sock = connect(path, b"gap-poster")
        self.sock.sendall(b"".join(set_state(SETUP_ID + i, n, v) for i, (n, v) in enumerate(self.STATES))
                          + b"".join(post(SETUP_ID + i, n, p, 3) for i, (n, p) in enumerate(self.RETAINED)))
        self.sock.setblocking(False)
        self.replies_due = 1 + len(self.STATES) + len(self.RETAINED)
        self.subscribers, self.stopped, self.out, self.buf = subscribers, stopped, bytearray(), bytearray()
        self.generated, self.start, self.rate, self.generating = 0, None, 0, False
        self.gen_times, self.errors, self.tally, self.ended, self.loop = array.array("d"), [], {}, None, loop
        loop.add(self.sock, self.on_readable, first=True)

    def post_fills(self):
        self.replies_due += len(FILLS)
        self.sock.settimeout(PROGRESS_TIMEOUT)
        self.sock.sendall(b"".join(post(SETUP_ID + 0x100 + i, FILL, p, 1) for i, p in enumerate(FILLS)))
        self.sock.setblocking(False)

    def pace(self, now):
        """Posts the ticks due by now and sends what it can; returns the time until the next tick is due."""
        if self.ended:
            return 0.05
        due = int((now - self.start) * self.rate) if self.generating else self.generated
        while self.generated < due:
            self.out += post(self.generated + 1, TICK, struct.pack(">Q", self.generated), 1)
            self.gen_times.append(now)
            self.generated += 1
        try:
            while self.out:
                del self.out[:self.sock.send(self.out)]
        except BlockingIOError:
            pass  # the daemon is not reading (mid hand-over): the ticks wait here, then in its socket
        except OSError as e:
            self.end(f"send failed: {e}")
        return (due + 1) / self.rate - (now - self.start) if self.generating else 0.05

    def count(self, kind, text):
        """Counts a recurring error, keeping its first instance."""
        self.tally[kind] = self.tally.get(kind, [0, text])
        self.tally[kind][0] += 1

    def end(self, why):
        if not self.ended:
            self.ended = why
            self.errors.append("poster: " + why)

    def on_readable(self, now):
        data = recv(self.sock, 1 << 16)
        if data == b"":
            self.end("EOF")
            self.loop.remove(self.sock)
        if not data:
            return
        self.buf += data
        pos = 0
        while (got := next_frame(self.buf, pos)) is not None:
            kind, body, pos = got
            if kind == 0x83:
                rid, seq, delivered = struct.unpack(">IQI", body)
                k = len(EXPECT.seqs)
                if rid >= SETUP_ID:
                    self.replies_due -= 1
                    if rid >= SETUP_ID + 0x100:
                        EXPECT.add_fill(seq)
                        if delivered != self.stopped:
                            self.count("fill", f"a gapf.fill post reached {delivered} connections, not {self.stopped}")
                    continue
                if rid != k + 1:
                    self.errors.append(f"POSTED for request {rid}, expected {k + 1}")
                elif EXPECT.seqs and seq != EXPECT.seqs[-1] + 1:
                    self.count("seq", f"tick {k} got sequence {seq} after {EXPECT.seqs[-1]}: another post came between")
                if delivered != self.subscribers:
                    self.count("short", f"tick {k} reached {delivered} connections, not {self.subscribers}")
                EXPECT.add(seq)
            elif kind in (0x81, 0x82) and self.replies_due:
                self.replies_due -= 1
            elif kind == 0x88:
                self.end("GOODBYE")
            else:
                self.errors.append(f"poster: unexpected frame 0x{kind:02x}: " + body[9:].decode(errors="replace"))
        del self.buf[:pos]
        for c in list(WAITING):
            c.process()


def snapshot(path):
    """Status, clients, names and the retained posts (SUBSCRIBE gapr.> with send-retained, UNSUBSCRIBE), on one
    connection, whose requests the daemon serves in order."""
    s = connect(path, b"gap-probe")
    s.settimeout(PROGRESS_TIMEOUT)
    s.sendall(subscribe(1, 1, b"gapr.>", flags=1) + unsubscribe(2, 1) + query(3, 1) + query(4, 0x83) + query(5, 0x82))
    result, parts, buf = {"retained": []}, [], bytearray()
    while "names" not in result:
        data = s.recv(1 << 20)
        if not data:
            raise Failure("the daemon closed the query connection")
        buf += data
        while (got := next_frame(buf)) is not None:
            kind, body, end = got
            del buf[:end]
            rid = struct.unpack_from(">I", body)[0]
            if kind == 0x8A:
                result["retained"].append(body[4:].hex())
            elif kind == 0x8B and rid == 3:
                result["status"] = json.loads(body[8:])
            elif kind in (0x8B, 0x8C):
                parts += json.loads(body[8:])
                if kind == 0x8B:
                    result["clients" if rid == 4 else "names"], parts = parts, []
            elif kind in (0x88, 0x8F):
                raise Failure(f"the query connection got frame 0x{kind:02x}: {body[4:].decode(errors='replace')}")
    s.close()
    result["clients"] = [c for c in result["clients"] if c["client_name"] != "gap-probe"]
    return result


def compare(before, after, posts, own):
    problems, b, a = [], before["status"], after["status"]
    for key in ("instance_id", "connections", "subscriptions", "subscribed_names", "patterns", "state_names",
                "retained_names"):
        if b.get(key) != a.get(key):
            problems.append(f"status {key}: {b.get(key)} before, {a.get(key)} after")
    if b["pid"] == a["pid"]:
        problems.append(f"the daemon's pid is still {b['pid']}: the restart command did not restart it")
    if own and a["posts"] - b["posts"] != posts and b["instance_id"] == a["instance_id"]:
        problems.append(f"the daemon counted {a['posts'] - b['posts']} posts during the run, not {posts}")
    fields = ("client_name", "pid", "uid", "gid", "command", "subscriptions", "suspended")
    for what, key, keep in (("clients", "connection", fields), ("names", "name", None)):
        old = {c[key]: {k: c.get(k) for k in keep} if keep else c for c in before[what]}
        new = {c[key]: {k: c.get(k) for k in keep} if keep else c for c in after[what]}
        diff = [f"{n}: {old.get(n)} -> {new.get(n)}" for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]
        if diff:
            problems.append(f"QUERY {what}: {len(diff)} of {len(old)} differ, e.g. " + "; ".join(diff[:2]))
    if before["retained"] != after["retained"]:
        problems.append(f"the RETAINED frames differ ({len(before['retained'])} before, "
                        f"{len(after['retained'])} after)")
    return problems


def window_stats(clients, gen_times, lo, hi):
    """Per client, the longest interval between receptions that overlaps [lo, hi], and the longest a tick received
    in it had waited since it was posted (a reception's first new tick waited longest); p50/p99/max of both."""
    gaps, lats = [], []
    for c in clients:
        g = lat = 0.0
        first, last = max(1, bisect.bisect_left(c.times, lo)), min(len(c.times), bisect.bisect_right(c.times, hi) + 1)
        for i in range(first, last):
            g = max(g, c.times[i] - c.times[i - 1])
            lat = max(lat, c.times[i] - gen_times[c.counts[i - 1]])
        gaps.append(g)
        lats.append(lat)
    pct = lambda v, p: round(sorted(v)[max(0, math.ceil(len(v) * p) - 1)] * 1000, 1) if v else None  # nearest rank
    return {name: {"p50": pct(v, .5), "p99": pct(v, .99), "max": pct(v, 1)} for name, v in
            (("gap_ms", gaps), ("latency_ms", lats))}


def watch_exit(loop, pid, on_exit):
    """Calls on_exit(now) when process pid ends (a pidfd: an event, no polling); False if it cannot be watched."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    def fire(now):
        loop.remove(fd)
        os.close(fd)
        on_exit(now)
    loop.add(fd, fire)
    return True


def child_main(a):
    """The stopped subscribers: connect, say `ready`, read (unchecked) until told on stdin where the expected posts
    are, check, and print their reports as one JSON line."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    EXPECT.ready, loop = False, Loop()
    clients = [Client(loop, a.socket, b"gap-s%d" % i, a.child_offset + i, a.subscriptions_per_client, fill=True)
               for i in range(a.clients)]
    loop.run(lambda: all(c.replies_due == 0 or c.eof for c in clients), "the stopped clients' subscriptions")
    print("ready", flush=True)
    line = bytearray()
    loop.add(0, lambda now: line.extend(os.read(0, 4096) or b"\n"))
    loop.run(lambda: line.endswith(b"\n"), "the parent's expectations", timeout=86400, absolute=True)
    with open(line.decode().strip()) as f:
        e = json.load(f)
    EXPECT.creds = tuple(e["creds"])
    for seq in e["fills"]:
        EXPECT.add_fill(seq)
    for seq in e["seqs"]:
        EXPECT.add(seq)
    EXPECT.final, EXPECT.ready = len(EXPECT.seqs), True
    for c in clients:
        c.process()
    try:
        loop.run(lambda: all(c.finished() for c in clients), "the stopped clients' ticks")
    finally:
        print(json.dumps([c.report() for c in clients]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("usage:")[0], usage=__doc__.split("usage: ")[1].split("\n--")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notifyd"); ap.add_argument("--socket"); ap.add_argument("--restart-command")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--subscriptions-per-client", type=int, default=10)
    ap.add_argument("--rate", type=float, default=1000); ap.add_argument("--suspended", type=int, default=5)
    ap.add_argument("--stopped", type=int, default=5); ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--after", type=float, default=3); ap.add_argument("--json")
    ap.add_argument("--poster-last", action="store_true", help="connect the poster after every subscriber")
    ap.add_argument("--stopped-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-offset", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stopped_child:
        return child_main(a)
    if not a.notifyd and not (a.socket and a.restart_command):
        ap.error("give --notifyd BIN, or --socket PATH and --restart-command CMD")
    if a.subscriptions_per_client < 1 or not 0 <= a.suspended <= a.clients or a.stopped < 0 or a.rate <= 0:
        ap.error("need K >= 1, 0 <= X <= N, Y >= 0 and a positive rate")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < a.clients + 64:
        raise SystemExit(f"the hard RLIMIT_NOFILE ({hard}) is too low for {a.clients} clients: raise ulimit -Hn")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    temp = tempfile.mkdtemp(prefix="restart-gap-")
    loop, started, child, result, problems, events, ready = Loop(), [], None, {}, [], {}, []
    path, env = a.socket or os.path.join(temp, "notifyd.sock"), dict(os.environ)
    mark = lambda name: (lambda now: events.setdefault(name, now))
    try:
        if a.notifyd:
            config = os.path.join(temp, "notifyd.conf")
            with open(config, "w") as f:  # a run as another user than root needs more than the default quotas
                f.write("".join(f"quota {q}-per-uid 1000000000\n" for q in ("connections", "subscriptions",
                        "pattern-labels", "outbound-bytes", "retained-bytes", "state-names")))
            # READY=1 on a NOTIFY_SOCKET of our own says when a daemon serves: no polling for its socket file.
            notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            notify.bind(os.path.join(temp, "notify.sock"))
            loop.add(notify, lambda now: b"READY=1" in notify.recv(4096).split(b"\n") and ready.append(now))
            env.update(NOTIFY_SOCKET=notify.getsockname(), NOTIFYD_BIN=a.notifyd, NOTIFYD_CONFIG=config)
            log = open(os.path.join(temp, "notifyd.log"), "ab")
            daemon_argv = [a.notifyd, "--socket", path, "--config", config, "--log-level", "notice"]
            started.append(subprocess.Popen(daemon_argv, env=env, stdout=log, stderr=log))
            watch_exit(loop, started[0].pid, mark("first_exit"))
            loop.run(lambda: ready or "first_exit" in events, "notifyd to start", absolute=True)
            if not ready:
                raise Failure(f"notifyd exited with {started[0].wait()} at start; see {log.name}")

        # Setup: the poster's states and retained posts, every client's subscriptions, the stopped child's.
        poster = None if a.poster_last else Poster(loop, path, a.clients + a.stopped, a.stopped)
        clients = [Client(loop, path, b"gap-c%d" % i, i, a.subscriptions_per_client, suspend=i < a.suspended,
                          timed=i >= a.suspended) for i in range(a.clients)]
        child_out = bytearray(b"" if a.stopped else b"ready\n[]\n")  # its `ready`, then its reports
        if a.stopped:
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--stopped-child", "--socket", path,
                                      "--clients", str(a.stopped), "--subscriptions-per-client",
                                      str(a.subscriptions_per_client), "--child-offset", str(a.clients)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            def on_child(now):
                data = os.read(child.stdout.fileno(), 1 << 20)
                child_out.extend(data or b"\nEOF\n")
                if not data:
                    loop.remove(child.stdout)
            loop.add(child.stdout, on_child)
        child_failed = lambda: b"\n" in child_out and not child_out.startswith(b"ready\n")
        setup_failed = lambda: (poster and (poster.ended or poster.errors)) or child_failed() \
            or any(c.eof or c.errors for c in clients)
        for _ in range(2):  # the second time for a poster that connects last
            loop.run(lambda: setup_failed() or ((not poster or not poster.replies_due) and b"\n" in child_out
                                                and not any(c.replies_due for c in clients)), "the setup")
            poster = poster or Poster(loop, path, a.clients + a.stopped, a.stopped)
        if setup_failed():
            raise Failure("setup failed: " + "; ".join(
                [f"{c.name.decode()}: {c.errors or 'EOF'}" for c in clients if c.eof or c.errors][:3]
                + poster.errors + ["the stopped child: " + child_out.decode()] * child_failed()))
        before = snapshot(path)
        me = [c for c in before["clients"] if c["client_name"] == "gap-poster"][0]
        EXPECT.creds = (me["pid"], me["uid"], me["gid"])  # as the daemon sees them (in its pid namespace)
        old_pid = before["status"]["pid"]
        env.update(NOTIFYD_SOCKET=path, NOTIFYD_PID=str(old_pid))
        if child:
            os.kill(child.pid, signal.SIGSTOP)
            os.waitpid(child.pid, os.WUNTRACED)  # returns once it is stopped
            poster.post_fills()
            loop.run(lambda: poster.replies_due == 0 or poster.ended, "the fills' POSTED")

        # The run: WARMUP seconds of ticks, the restart, AFTER seconds more once the old daemon is gone.
        t_start = poster.start = time.monotonic()
        poster.rate, poster.generating = a.rate, True
        def hook(now):
            if "restart" not in events and now >= t_start + a.warmup:
                events["restart"] = time.monotonic()
                log = open(os.path.join(temp, "restart.log"), "ab")
                if a.restart_command:
                    cmd = subprocess.Popen(a.restart_command, shell=True, env=env, stdout=log, stderr=log,
                                           start_new_session=True)
                    if not watch_exit(loop, cmd.pid, mark("command_exit")):
                        raise Failure("cannot watch the restart command")
                else:  # the command is the successor itself: it does not return
                    cmd = subprocess.Popen(daemon_argv + ["--replace"], env=env, stdout=log, stderr=log)
                started.append(cmd)
                if not watch_exit(loop, old_pid, mark("old_exit")):
                    print(f"note: the old daemon (pid {old_pid}) cannot be watched: the window ends with the command")
                    events["no_pidfd"] = True
            return poster.pace(now)
        window_end = lambda: events.get("command_exit" if "no_pidfd" in events else "old_exit")
        loop.run(lambda: window_end() is not None, "the hand-over (the old daemon to exit)", timeout=a.warmup + 120,
                 hook=hook, absolute=True)
        t0, t_end = events["restart"], window_end()
        if a.notifyd:
            started[0].poll()  # reaped: a restart command waiting for the pid to be gone sees it gone
        loop.run(lambda: time.monotonic() >= t_end + a.after, "the end of the run", timeout=a.after + 60,
                 hook=hook, absolute=True)
        poster.generating = False
        try:
            loop.run(lambda: poster.ended or (not poster.out and len(EXPECT.seqs) == poster.generated),
                     "the last ticks' POSTED", hook=hook)
        except Failure as e:
            problems.append(str(e))
        EXPECT.final = len(EXPECT.seqs)
        try:
            after = snapshot(path)
        except (OSError, Failure) as e:
            after, _ = None, problems.append(f"cannot query the daemon after the restart: {e}")

        # The stopped and suspended clients catch up; every client must then have every tick and its PONG.
        if child:
            with open(os.path.join(temp, "expect.json"), "w") as f:
                json.dump({"creds": EXPECT.creds, "seqs": EXPECT.seqs, "fills": EXPECT.fill_seqs}, f)
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write(f.name.encode() + b"\n")
            child.stdin.flush()
        for c in clients[:a.suspended]:
            if not c.eof:
                c.sock.send(bare(0x09, RESUME_ID))
        for c in clients:
            c.process()
        try:  # on a timeout the verdict still names the clients that lack something
            loop.run(lambda: all(c.finished() for c in clients) and child_out.count(b"\n") >= 2,
                     "every client's last tick")
        except Failure as e:
            problems.append(str(e))

        # The verdict.
        reports = [c.report() for c in clients]
        try:
            reports += json.loads(child_out.split(b"\n")[1])
        except ValueError:
            problems.append("the stopped child did not report: " + child_out.decode(errors="replace")[-300:])
        eofs = sum(r["eof"] for r in reports) + (poster.ended == "EOF")
        goodbyes = sum(r["goodbye"] for r in reports) + (poster.ended == "GOODBYE")
        if eofs or goodbyes:
            problems.append(f"{eofs} EOF and {goodbyes} GOODBYE (a hand-over has none)")
        bad = sorted((r for r in reports if r["error_count"] or r["eof"] or r["unchecked_bytes"] or not r["done"]),
                     key=lambda r: r["done"])  # unfinished first
        if bad:
            problems.append(f"{len(bad)} clients failed the tick check, e.g. " + "; ".join(
                f"{r['name']}: {r['ticks']}/{EXPECT.final} ticks{'' if r['done'] else ' (unfinished)'}"
                f"{', EOF' if r['eof'] else ''}, {r['error_count']} errors {r['errors'][:2]}"
                + (f", {r['unchecked_bytes']} bytes unchecked" if r["unchecked_bytes"] else "") for r in bad[:3]))
        problems += poster.errors[:5] + [f"{n} POSTED like this one: {first}" for n, first in poster.tally.values()]
        if after:
            problems += compare(before, after, poster.generated + len(EXPECT.fill_seqs), bool(a.notifyd))
        if a.notifyd and not a.restart_command and started[0].returncode != 0:
            problems.append(f"the old daemon exited with {started[0].returncode}, not 0")
        timed = [c for c in clients if c.timed]
        held = {"gap-c%d" % i for i in range(a.suspended)}
        owed = lambda keep: sum(c["lag_bytes"] for c in (after or {}).get("clients", []) if keep(c["client_name"]))
        ms = lambda t: round((t - t0) * 1000, 1) if t else None
        result = {
            "clients": a.clients, "stopped": a.stopped, "suspended": a.suspended, "poster_last": a.poster_last,
            "subscriptions": (a.clients + a.stopped) * a.subscriptions_per_client + a.stopped, "rate": a.rate,
            "ticks": EXPECT.final, "posted_per_second": round(poster.generated / (t_end + a.after - t_start), 1),
            "restart_command": a.restart_command or " ".join(daemon_argv + ["--replace"]),
            "old_daemon_exit_ms": ms(events.get("old_exit")), "command_ms": ms(events.get("command_exit")),
            "successor_ready_ms": ms(ready[1] if len(ready) > 1 else None),
            "restart_window": window_stats(timed, poster.gen_times, t0, t_end),
            "steady_state": window_stats(timed, poster.gen_times, t_start + a.warmup / 2, t0),
            "owed_after_handover_bytes": {"stopped": owed(lambda n: n.startswith("gap-s")),
                                          "suspended": owed(lambda n: n in held)},
            "eof": eofs, "goodbye": goodbyes, "failed_clients": bad[:20],
            "daemon_pid": [old_pid, after["status"]["pid"] if after else None],
        }
        w, s, o = result["restart_window"], result["steady_state"], result["owed_after_handover_bytes"]
        print(f"{a.clients} clients + {a.stopped} stopped, {result['subscriptions']} subscriptions, {a.suspended} "
              f"suspended; {EXPECT.final} ticks at {result['posted_per_second']}/s; "
              f"restart: {result['restart_command']}")
        print(f"old daemon gone after {result['old_daemon_exit_ms']} ms, command returned after {result['command_ms']} "
              f"ms, successor READY after {result['successor_ready_ms']} ms; "
              f"pid {old_pid} -> {result['daemon_pid'][1]}")
        for key, what in (("gap_ms", "gap"), ("latency_ms", "worst tick latency")):
            print(f"{what} per subscriber ({len(timed)}) around the restart: p50 {w[key]['p50']}, p99 {w[key]['p99']}, "
                  f"max {w[key]['max']} ms (steady state: p50 {s[key]['p50']}, p99 {s[key]['p99']}, "
                  f"max {s[key]['max']})")
        print(f"owed after the hand-over: {o['stopped']} bytes to the stopped clients, {o['suspended']} to the "
              f"suspended; EOF {eofs}, GOODBYE {goodbyes}")
        if after and a.stopped and not o["stopped"]:
            print("note: nothing was owed to the stopped clients after the restart: owed bytes were not exercised")
    except Failure as e:
        problems.append(str(e))
    finally:
        if child and child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
        if a.notifyd:  # stop the last daemon, whoever started it: its pid is in its status
            for key in list(loop.sel.get_map().values()):
                if isinstance(key.fileobj, socket.socket) and key.fileobj.type == socket.SOCK_STREAM:
                    loop.remove(key.fileobj)
                    key.fileobj.close()
            try:
                last, gone = snapshot(path)["status"]["pid"], []
                os.kill(last, signal.SIGTERM)
                if watch_exit(loop, last, gone.append):
                    loop.run(lambda: gone, "the last daemon to stop", timeout=30, absolute=True)
            except (OSError, Failure) as e:
                print(f"note: could not stop the last daemon cleanly: {e}")
            for p in started:
                if p.poll() is None:
                    p.kill()
                    problems.append(f"pid {p.pid} ({p.args if isinstance(p.args, str) else p.args[0]}) "
                                    "had to be killed")
                p.wait()
    result["problems"] = problems
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems) + f"\n(logs in {temp})")
        sys.exit(1)
    print("PASSED: no EOF or GOODBYE; every tick once, in order, byte for byte; POSTED consecutive; tables equal")


if __name__ == "__main__":
    main()
