#!/usr/bin/env python3
"""Issue 17's metrics targets: a scrape of the metrics socket from a daemon with CONNECTIONS connections of
SUBSCRIPTIONS subscriptions each (one of them stalled, so lag series exist) — its time and size, whether promtool
accepts it, and the round-trip p99 of a bystander's PING with and without a scrape every 100 ms: ROUNDS alternating
phases per run, samples pooled per condition, the scraper in its own process; the median ratio of REPEAT runs.

usage: metrics_scrape.py NOTIFYD [--connections N] [--subscriptions K] [--scrapes N] [--pings N] [--rounds N]
                         [--repeat N] [--check]"""
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


def p99(samples):
    xs = sorted(samples); return xs[int(len(xs) * 0.99) - 1]


def p50(samples):
    xs = sorted(samples); return xs[len(xs) // 2]


def scrape_loop(path):
    """Child process: scrape every 100 ms while the last line read from stdin is 1; exit on EOF."""
    on = threading.Event(); done = threading.Event()
    def control():
        for line in sys.stdin:
            (on.set if line.strip() == "1" else on.clear)()
        done.set(); on.set()
    threading.Thread(target=control, daemon=True).start()
    while not done.is_set():
        on.wait()
        if done.is_set(): break
        scrape(path); time.sleep(0.1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--scrape-loop":
        return scrape_loop(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("notifyd"); ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--subscriptions", type=int, default=10); ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--pings", type=int, default=3000); ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check", action="store_true",
                    help="make test's check: promtool must pass and the size stay bounded; no timing")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and a.connections > hard - 100:
        print(f"descriptor limit {hard}: {hard - 100} connections instead of {a.connections}")
        a.connections = hard - 100
    d = tempfile.mkdtemp(prefix="ms-"); sock = d + "/s.sock"; metrics = d + "/metrics.sock"
    daemon = subprocess.Popen([a.notifyd, "--socket", sock, "--metrics-socket", metrics, "--log-level", "error"])
    try:
        wait_for_socket(sock); wait_for_socket(metrics)
        # A stalled subscriber first, so lag series exist; then the baseline scrape, before the crowd connects.
        stalled = socket.socket(socket.AF_UNIX); stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(sock)
        stalled.sendall(hello(b"stalled") + frame(0x02, struct.pack(">IIBBI", 1, 1, 0, 1, 100000) + s16(b"lag.x")))
        poster = socket.socket(socket.AF_UNIX); poster.connect(sock); poster.sendall(hello(b"poster"))
        one = frame(0x04, struct.pack(">IB", 0, 0) + s16(b"lag.x") + struct.pack(">I", 1000) + b"x" * 1000)
        poster.sendall(one * 3000)
        end = time.time() + 30
        while b"notifyd_client_lag_bytes{" not in scrape(metrics)[1]:
            if time.time() > end: raise SystemExit("FAIL: no lag series for the stalled subscriber within 30 s")
            time.sleep(0.05)
        _, baseline = scrape(metrics)

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

        times, size = [], 0
        for _ in range(a.scrapes):
            t, data = scrape(metrics); times.append(t); size = len(data)
        times.sort()
        text = data.decode()
        lag_series = sum(1 for line in text.splitlines() if line.startswith("notifyd_client_lag_bytes{"))
        print(f"connections {a.connections}, subscriptions {a.connections * a.subscriptions}: scrape "
              f"p50 {times[len(times) // 2] * 1000:.2f} ms, p99 {times[int(len(times) * 0.99) - 1] * 1000:.2f} ms, "
              f"max {times[-1] * 1000:.2f} ms; {size} bytes, {len(text.splitlines())} lines, {lag_series} lag series")
        # Bounded: the crowd adds no series, only digits to the values.
        lines_before, lines_after = len(baseline.splitlines()), len(text.splitlines())
        bounded = lines_after == lines_before and size <= len(baseline) + 256
        print(f"size with no other clients: {len(baseline)} bytes, {lines_before} lines; with {a.connections}: "
              f"{size} bytes, {lines_after} lines: {'bounded' if bounded else 'NOT BOUNDED'}")
        failures = [] if bounded else ["the scrape grew with the number of clients"]
        promtool = shutil.which("promtool")
        if promtool:
            for label, exposition in (("without clients", baseline), (f"with {a.connections} clients", data)):
                check = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True)
                report = (check.stdout + check.stderr).decode().strip()
                print(f"promtool check metrics ({label}): exit {check.returncode} {report}")
                if check.returncode != 0 or report:
                    failures.append(f"promtool check metrics {label}: {report or 'exit %d' % check.returncode}")
        elif a.check:
            failures.append("promtool is not installed (apt-get install prometheus)")
        else:
            print("promtool check metrics: promtool not installed (apt-get install prometheus)")
        if a.check:
            if failures: raise SystemExit("FAIL: " + "; ".join(failures))
            print("metrics check passed"); return

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
            return samples

        # The scraper is its own process: a thread here would share the pinger's GIL and measure Python, not the
        # daemon. Short alternating rounds, samples pooled per condition, so drift on the machine hits both alike.
        scraper = subprocess.Popen([sys.executable, __file__, "--scrape-loop", metrics], stdin=subprocess.PIPE)
        ratios = []
        try:
            for _ in range(a.repeat):
                results = {"idle": [], "scraped": []}
                per_round = {"idle": [], "scraped": []}
                for r in range(a.rounds):
                    for cond in (("idle", "scraped") if r % 2 == 0 else ("scraped", "idle")):
                        scraper.stdin.write(b"1\n" if cond == "scraped" else b"0\n"); scraper.stdin.flush()
                        samples = pings(a.pings)
                        results[cond] += samples; per_round[cond].append(p99(samples))
                idle = p99(results["idle"]); scraped = p99(results["scraped"]); ratios.append(scraped / idle)
                spread = lambda xs: f"{min(xs) * 1e6:.0f}–{max(xs) * 1e6:.0f}"
                print(f"round trip p99 ({a.rounds} alternating rounds of {a.pings} pings per condition, pooled): "
                      f"idle {idle * 1e6:.1f} µs, scraped every 100 ms {scraped * 1e6:.1f} µs, ratio {scraped / idle:.3f}; "
                      f"p50 {p50(results['idle']) * 1e6:.1f} / {p50(results['scraped']) * 1e6:.1f} µs; "
                      f"per-round p99 idle {spread(per_round['idle'])} µs, scraped {spread(per_round['scraped'])} µs",
                      flush=True)
        finally:
            scraper.stdin.close(); scraper.wait(20)
        # One run's pooled p99 still moves about ±10% with the machine; the median of several runs is the figure.
        print(f"round trip p99 ratio, scraped / idle: median {sorted(ratios)[len(ratios) // 2]:.3f} of {len(ratios)} "
              f"runs ({', '.join(f'{r:.3f}' for r in ratios)}); target ≤ 1.05")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try: daemon.wait(20)
        except subprocess.TimeoutExpired: daemon.kill()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
