#!/usr/bin/env python3
"""Issue 16's targets: a daemon restart (a hand-over) under load must not drop a client or a notification.

CLIENTS connections, each with SUBSCRIPTIONS subscriptions (exact names and patterns, every policy) including
`gap.tick` with queue(1000000); a few of them SUSPENDed (resumed after the restart) and a few in a child process
that is SIGSTOPped across the restart; a poster posts `gap.tick` (an 8-byte counter) at RATE posts/s all along.
RESTART is a shell command (`systemctl restart notifyd`), or, with --notifyd BIN, the tool starts BIN itself and
restarts it with `BIN --replace`. Checks: no EOF and no GOODBYE on any client; every client gets every tick
exactly once, in order, with consecutive sequence numbers; state values and the subscriptions per connection are
the same before and after (QUERY clients/names). Reports the gap each subscriber saw (the longest pause between two
ticks around the restart): p50, p99, max.

usage: handover_gap.py (--notifyd BIN | --socket PATH --restart CMD) [--clients N] [--subscriptions K] [--rate R]
       [--suspended S] [--stopped T] [--seconds-before B] [--seconds-after A]"""
import argparse, json, os, resource, selectors, signal, socket, struct, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wire import frame, hello, s16

TICK = b"gap.tick"


def subscribe(request, sub, name, policy=1, limit=1000000):
    return frame(0x02, struct.pack(">IIBBI", request, sub, 0, policy, limit) + s16(name))


class Client:
    """One connection: parses frames as they come and records the ticks."""
    def __init__(self, path, index, subscriptions, suspend):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(path); self.sock.setblocking(False)
        self.buf = b""; self.ticks = []; self.times = []; self.seqs = []; self.ended = None; self.oks = 0
        self.subscriptions = subscriptions
        out = hello(b"gap-%d" % index) + subscribe(1, 1, TICK)
        for j in range(1, subscriptions):
            name = (b"gap.%d.%d" % (index, j)) if j % 3 else (b"gap.p%d.*" % j if j % 2 else b"gap.q%d.>" % j)
            policy, limit = [(0, 0), (1, 100), (2, 0)][j % 3]
            out += subscribe(1 + j, 1 + j, name, policy, limit)
        if suspend: out += frame(0x08, struct.pack(">I", 9999))
        self.sock.sendall(out)

    def on_readable(self):
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.ended = self.ended or "EOF"; return
        self.buf += data
        now = time.monotonic()
        while len(self.buf) >= 4:
            n = struct.unpack(">I", self.buf[:4])[0]
            if len(self.buf) < 4 + n: break
            t, body = self.buf[4], self.buf[5:4 + n]; self.buf = self.buf[4 + n:]
            if t == 0x82: self.oks += 1
            elif t == 0x88: self.ended = "GOODBYE"
            elif t == 0x8F: self.ended = "ERROR " + body[7:].decode(errors="replace")
            elif t == 0x85:
                seq = struct.unpack(">Q", body[:8])[0]
                nl = struct.unpack(">H", body[20:22])[0]
                if body[22:22 + nl] == TICK:
                    payload = body[22 + nl + 4:]
                    self.ticks.append(struct.unpack(">Q", payload)[0]); self.seqs.append(seq); self.times.append(now)


def query(path, kind):
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.settimeout(30)
    s.sendall(hello(b"gap-query") + frame(0x0A, struct.pack(">IB", 7, kind | 0x80) + s16(b"")))
    buf, parts = b"", []
    while True:
        d = s.recv(1 << 16)
        if not d: raise SystemExit("query connection closed")
        buf += d
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
            n = struct.unpack(">I", buf[:4])[0]; t, body = buf[4], buf[5:4 + n]; buf = buf[4 + n:]
            if t in (0x8B, 0x8C): parts.append(json.loads(body[8:].decode()))
            if t == 0x8B:
                s.close(); return [x for p in parts for x in (p if isinstance(p, list) else [p])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--notifyd"); ap.add_argument("--socket"); ap.add_argument("--restart")
    ap.add_argument("--clients", type=int, default=1000); ap.add_argument("--subscriptions", type=int, default=10)
    ap.add_argument("--rate", type=int, default=1000); ap.add_argument("--suspended", type=int, default=5)
    ap.add_argument("--stopped", type=int, default=5)
    ap.add_argument("--seconds-before", type=float, default=2); ap.add_argument("--seconds-after", type=float, default=3)
    a = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    temp = None; daemon = None; proc = None
    if a.notifyd:
        temp = tempfile.mkdtemp(prefix="gap-"); path = temp + "/s.sock"
        daemon = subprocess.Popen([a.notifyd, "--socket", path, "--log-level", "error"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        restart = f"exec {a.notifyd} --socket {path} --replace --log-level error"
    else:
        path, restart = a.socket, a.restart
    try:
        for _ in range(400):
            if os.path.exists(path): break
            time.sleep(0.05)
        sel = selectors.DefaultSelector()
        clients = []
        for i in range(a.clients):
            c = Client(path, i, a.subscriptions, suspend=i < a.suspended); clients.append(c)
            sel.register(c.sock, selectors.EVENT_READ, c)
        deadline = time.monotonic() + 60
        while any(c.oks < c.subscriptions + (1 if i < a.suspended else 0) for i, c in enumerate(clients)):
            if time.monotonic() > deadline: raise SystemExit("subscriptions not acknowledged within 60 s")
            for key, _ in sel.select(1): key.data.on_readable()
        # Stopped subscribers: a child process holding connections it will not read while SIGSTOPped.
        child_code = (f"import socket,struct,sys,time\nsys.path.insert(0,{os.path.dirname(os.path.abspath(__file__))!r})\n"
                      f"from wire import frame,hello,s16\nss=[]\nfor i in range({a.stopped}):\n"
                      f" s=socket.socket(socket.AF_UNIX);s.connect({path!r});s.sendall(hello(b'stopped')+frame(2,struct.pack('>IIBBI',1,1,0,1,1000000)+s16({TICK!r})));ss.append(s)\n"
                      "print('ready',flush=True)\ntotal=[0]*len(ss)\nsys.stdin.readline()\n"
                      "import select\nend=time.time()+float(sys.argv[1])\nbufs=[b'']*len(ss)\n"
                      "while time.time()<end:\n r,_,_=select.select(ss,[],[],0.2)\n for s in r:\n  d=s.recv(1<<16)\n  if not d: print('EOF',flush=True);sys.exit(1)\n")
        stopped = subprocess.Popen([sys.executable, "-c", child_code, str(a.seconds_after + 5)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        assert stopped.stdout.readline().strip() == "ready"
        poster = socket.socket(socket.AF_UNIX); poster.connect(path); poster.sendall(hello(b"gap-poster"))
        poster.sendall(frame(0x06, struct.pack(">IQ", 5, 42) + s16(b"gap.state")))
        before_clients = {c["connection"]: c["subscriptions"] for c in query(path, 3) if c["client_name"] != "gap-query"}
        before_names = sorted(json.dumps(n, sort_keys=True) for n in query(path, 2))
        counter = 0; start = time.monotonic(); restarted_at = None; restart_duration = None
        os.kill(stopped.pid, signal.SIGSTOP)
        end = start + a.seconds_before + a.seconds_after
        while time.monotonic() < end:
            now = time.monotonic()
            due = int((now - start) * a.rate)
            while counter < due:
                poster.send(frame(0x04, struct.pack(">IB", 0, 0) + s16(TICK) + struct.pack(">I", 8) + struct.pack(">Q", counter)))
                counter += 1
            if restarted_at is None and now - start >= a.seconds_before:
                restarted_at = time.monotonic()
                proc = subprocess.Popen(restart, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if proc is not None and restart_duration is None and proc.poll() is not None and not a.notifyd:
                restart_duration = time.monotonic() - restarted_at
            for key, _ in sel.select(0.001): key.data.on_readable()
        os.kill(stopped.pid, signal.SIGCONT); stopped.stdin.write("go\n"); stopped.stdin.flush()
        for i in range(a.suspended):
            clients[i].sock.sendall(frame(0x09, struct.pack(">I", 9998)))
        deadline = time.monotonic() + 60
        while any(len(c.ticks) < counter and not c.ended for c in clients):
            if time.monotonic() > deadline: break
            for key, _ in sel.select(0.5): key.data.on_readable()
        failures = []
        ended = [c.ended for c in clients if c.ended]
        if ended: failures.append(f"{len(ended)} clients ended: {ended[:3]}")
        for i, c in enumerate(clients):
            if c.ticks != list(range(counter)):
                failures.append(f"client {i}: {len(c.ticks)} ticks of {counter}, first wrong at "
                                f"{next((k for k, t in enumerate(c.ticks) if t != k), len(c.ticks))}"); break
            if any(b != a_ + 1 for a_, b in zip(c.seqs, c.seqs[1:])):
                failures.append(f"client {i}: sequence numbers not consecutive"); break
        after_clients = {c["connection"]: c["subscriptions"] for c in query(path, 3) if c["client_name"] != "gap-query"}
        after_names = sorted(json.dumps(n, sort_keys=True) for n in query(path, 2))
        if {k: v for k, v in after_clients.items() if k in before_clients} != before_clients or \
                not set(before_clients) <= set(after_clients):
            failures.append("QUERY clients differs after the restart")
        if after_names != before_names: failures.append("QUERY names differs after the restart")
        gaps = []
        for i, c in enumerate(clients[a.suspended:], a.suspended):
            window = [t for t in c.times if restarted_at - 1 <= t]
            if len(window) > 1: gaps.append(max(b - a_ for a_, b in zip(window, window[1:])))
        gaps.sort()
        if stopped.wait(30) != 0: failures.append("a SIGSTOPped subscriber saw its connection end")
        pct = lambda p: gaps[min(len(gaps) - 1, int(len(gaps) * p))] * 1000 if gaps else float("nan")
        print(f"{a.clients} clients, {a.clients * a.subscriptions} subscriptions, {a.suspended} suspended, "
              f"{a.stopped} SIGSTOPped, {counter} ticks at {a.rate}/s; restart: {restart!r}"
              + (f" ({restart_duration * 1000:.0f} ms)" if restart_duration else ""))
        print(f"gap each subscriber saw around the restart: p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms, "
              f"max {pct(1.0):.1f} ms; EOF/GOODBYE: {len(ended)}")
        if failures:
            print("FAILED: " + "; ".join(failures)); sys.exit(1)
        print("passed: no client ended; every tick exactly once, in order, consecutive sequence numbers; tables equal")
    finally:
        if a.notifyd:
            # The successor (started by the restart command, `exec`ed) is stopped; the first must have exited.
            for process in (proc, daemon):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try: process.wait(20)
                    except subprocess.TimeoutExpired: process.kill()


if __name__ == "__main__":
    main()
