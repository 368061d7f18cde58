#!/usr/bin/env python3
"""Issue 15: a user who takes every per-user quota of a notifyd, for the hostile-user benchmark (run by
Benchmarks/run.py as uid 65534 through setpriv).

usage: quota_attacker.py SOCKET [SPARE]
Opens connections until the daemon refuses one (connections-per-uid), fills subscriptions-per-uid with exact
names, pattern-labels-per-uid with branching patterns, state-names-per-uid with state values and
retained-bytes-per-uid with retained payloads, prints one JSON line with what it got, then holds everything
(never reading again) until it is killed. SPARE connections (and subscriptions) of the quota are given back once it
is taken, for the same uid's flood poster and stopped subscriber."""
import json, socket, struct, sys, time

from wire import frame, hello, s16

path = sys.argv[1]
spare = int(sys.argv[2]) if len(sys.argv) > 2 else 0


class Connection:
    def __init__(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.sock.settimeout(30)
        self.buffer = b""
        self.sock.sendall(hello(b"quota-attacker"))

    def read(self):
        while True:
            if len(self.buffer) >= 4:
                n = struct.unpack(">I", self.buffer[:4])[0]
                if len(self.buffer) >= 4 + n:
                    body, self.buffer = self.buffer[4:4 + n], self.buffer[4 + n:]
                    return body
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.buffer += data

    def requests(self, frames):
        """Sends frames that each get one reply (OK or ERROR); returns how many got OK."""
        self.sock.sendall(b"".join(frames))
        ok = 0
        for _ in frames:
            reply = self.read()
            while reply is not None and reply[0] not in (0x82, 0x8F, 0x83):
                reply = self.read()
            if reply is not None and reply[0] in (0x82, 0x83):
                ok += 1
        return ok


got = {}
connections = []
while len(connections) < 1024:
    try:
        c = Connection()
        first = c.read()
    except OSError:
        # Refused: the daemon closed it with its ERROR unread behind our HELLO, which Linux reports as a reset.
        break
    if first is None or first[0] != 0x81:
        break
    connections.append(c)
for c in connections[len(connections) - spare:]:
    c.sock.close()
connections = connections[:len(connections) - spare]
got["connections"] = len(connections)

subscription_id = 1
request_id = 1


def subscribe(c, pattern, policy=0, limit=0):
    global subscription_id, request_id
    f = frame(2, struct.pack(">IIBBI", request_id, subscription_id, 0, policy, limit) + s16(pattern))
    subscription_id += 1
    request_id += 1
    return f


# Patterns up to the label quota: 16 one-letter labels, `*` by the bits of the index (they all match l.l.….l).
got["pattern_subscriptions"] = connections[0].requests(
    [subscribe(connections[0], ".".join("*" if (i >> (p % 12)) & 1 else "l" for p in range(16)).encode())
     for i in range(4096)])
# Exact names up to the subscription quota, spread over the other connections.
exact = 0
first_exact_id = subscription_id
for index, c in enumerate(connections[1:]):
    exact += c.requests([subscribe(c, f"attacker.c{index}.n{k}".encode()) for k in range(300)])
# Give back SPARE subscriptions (the first ones, on the second connection) for the flood's stopped subscriber.
if spare and len(connections) > 1:
    frames = []
    for k in range(spare):
        frames.append(frame(3, struct.pack(">II", request_id, first_exact_id + k)))
        request_id += 1
    exact -= connections[1].requests(frames)
got["exact_subscriptions"] = exact
# State names.
c = connections[0]
frames = []
for k in range(12000):
    frames.append(frame(6, struct.pack(">IQ", request_id, k) + s16(f"attacker.state.{k}".encode())))
    request_id += 1
got["state_names"] = c.requests(frames)
# Retained payloads of 60 KiB.
payload = b"r" * 60000
frames = []
for k in range(400):
    frames.append(frame(4, struct.pack(">IB", request_id, 3) + s16(f"attacker.retained.{k}".encode())
                        + struct.pack(">I", len(payload)) + payload))
    request_id += 1
got["retained_posts"] = c.requests(frames)
print(json.dumps(got), flush=True)
while True:
    time.sleep(60)
