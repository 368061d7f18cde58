#!/usr/bin/env python3
"""Issue 17's metrics targets: a scrape of the metrics socket from a daemon with CONNECTIONS connections of
SUBSCRIPTIONS subscriptions each (one of them stalled, so lag series exist) — its time and size, whether promtool
accepts it, and the round-trip p99 of a bystander's PING with and without a scrape every 100 ms (alternating
phases).

usage: metrics_scrape.py NOTIFYD [--connections N] [--subscriptions K] [--scrapes N] [--pings N] [--rounds N]"""
import argparse, os, resource, shutil, signal, socket, struct, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wire import frame, hello, s16


def wait_for_socket(path, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(path); s.close(); return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"no daemon at {path} within {timeout} s")


def read_frame(s, buf):
    while True:
        if len(buf) >= 4:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) >= 4 + n:
                return buf[4], buf[5:4 + n], buf[4 + n:]
        d = s.recv(1 << 16)
        if not d: raise SystemExit("connection closed")
        buf += d


def scrape(path):
    s = socket.socket(socket.AF_UNIX); s.settimeout(20)
    t0 = time.perf_counter(); s.connect(path); data = b""
    while True:
        d = s.recv(1 << 16)
        if not d: break
        data += d
    elapsed = time.perf_counter() - t0; s.close()
    return elapsed, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("notifyd"); ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--subscriptions", type=int, default=10); ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--pings", type=int, default=3000); ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = tempfile.mkdtemp(prefix="ms-"); sock = d + "/s.sock"; metrics = d + "/metrics.sock"
    daemon = subprocess.Popen([a.notifyd, "--socket", sock, "--metrics-socket", metrics, "--log-level", "error"])
    try:
        wait_for_socket(sock); wait_for_socket(metrics)
        clients = []
        for i in range(a.connections):
            c = socket.socket(socket.AF_UNIX); c.connect(sock)
            out = hello(b"c%d" % i)
            for j in range(a.subscriptions):
                name = (b"m.%d.%d" % (i, j)) if j % 2 == 0 else (b"m.%d.*" % j)
                policy, limit = [(0, 0), (1, 1000), (2, 0)][j % 3]
                out += frame(0x02, struct.pack(">IIBBI", 100 + j, 1 + j, 0, policy, limit) + s16(name))
            c.sendall(out); clients.append(c)
        # Every client reads its WELCOME and OKs, so the daemon is idle when measuring.
        for c in clients:
            buf = b""; oks = 0
            while oks < a.subscriptions:
                t, body, buf = read_frame(c, buf)
                if t == 0x82: oks += 1
                elif t == 0x8F: raise SystemExit(f"subscription refused: {body[9:]!r}")
        stalled = socket.socket(socket.AF_UNIX); stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(sock)
        stalled.sendall(hello(b"stalled") + frame(0x02, struct.pack(">IIBBI", 1, 1, 0, 1, 100000) + s16(b"lag.x")))
        poster = socket.socket(socket.AF_UNIX); poster.connect(sock); poster.sendall(hello(b"poster"))
        one = frame(0x04, struct.pack(">IB", 0, 0) + s16(b"lag.x") + struct.pack(">I", 1000) + b"x" * 1000)
        poster.sendall(one * 3000)
        time.sleep(1.0)

        times, size = [], 0
        for _ in range(a.scrapes):
            t, data = scrape(metrics); times.append(t); size = len(data)
        times.sort()
        text = data.decode()
        lag_series = sum(1 for line in text.splitlines() if line.startswith("notifyd_client_lag_bytes{"))
        print(f"connections {a.connections}, subscriptions {a.connections * a.subscriptions}: scrape "
              f"p50 {times[len(times) // 2] * 1000:.2f} ms, p99 {times[int(len(times) * 0.99) - 1] * 1000:.2f} ms, "
              f"max {times[-1] * 1000:.2f} ms; {size} bytes, {len(text.splitlines())} lines, {lag_series} lag series")
        promtool = shutil.which("promtool")
        if promtool:
            check = subprocess.run([promtool, "check", "metrics"], input=data, capture_output=True)
            print(f"promtool check metrics: exit {check.returncode} {check.stdout.decode().strip()} {check.stderr.decode().strip()}")
        else:
            print("promtool check metrics: promtool not installed (apt-get install prometheus)")

        bystander = socket.socket(socket.AF_UNIX); bystander.connect(sock); bystander.sendall(hello(b"pinger"))
        buf = b""
        t, _, buf = read_frame(bystander, buf)  # WELCOME

        def pings(n):
            nonlocal buf
            samples = []
            for i in range(n):
                t0 = time.perf_counter()
                bystander.sendall(frame(0x05, struct.pack(">I", i + 1)))
                while True:
                    t, _, buf = read_frame(bystander, buf)
                    if t == 0x84: break
                samples.append(time.perf_counter() - t0)
            samples.sort(); return samples[int(len(samples) * 0.99) - 1]

        results = {"idle": [], "scraped": []}
        for _ in range(a.rounds):
            results["idle"].append(pings(a.pings))
            stop = threading.Event()
            def scraper():
                while not stop.is_set():
                    scrape(metrics); stop.wait(0.1)
            th = threading.Thread(target=scraper); th.start()
            results["scraped"].append(pings(a.pings)); stop.set(); th.join()
        idle = sorted(results["idle"])[len(results["idle"]) // 2]; scraped = sorted(results["scraped"])[len(results["scraped"]) // 2]
        print(f"round trip p99 (median of {a.rounds} alternating rounds of {a.pings} pings): idle {idle * 1e6:.1f} µs, "
              f"scraped every 100 ms {scraped * 1e6:.1f} µs, ratio {scraped / idle:.3f}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try: daemon.wait(20)
        except subprocess.TimeoutExpired: daemon.kill()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
