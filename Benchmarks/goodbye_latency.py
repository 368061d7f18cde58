#!/usr/bin/env python3
"""Issue 15 item 7: how long after SIGTERM a bystander gets GOODBYE while another connection (a subscriber that
never reads, queue(100000)) holds notifications from 1,000,000 posts of 16 bytes.

usage: goodbye_latency.py SOCKET DAEMON_PID   (a release daemon started just before, nothing else connected)"""
import socket, struct, sys, time, os, signal, subprocess
sock_path, pid = sys.argv[1], int(sys.argv[2])
from wire import frame, hello, s16
def conn(name):
    s = socket.socket(socket.AF_UNIX); s.connect(sock_path)
    s.sendall(hello(name)); return s
def readall_frames(s, want_type, timeout):
    s.settimeout(timeout); buf=b""
    while True:
        d = s.recv(1<<20)
        if not d: return None
        buf += d
        while len(buf) >= 5:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) < 4+n: break
            t = buf[4]; buf = buf[4+n:]
            if t == want_type: return time.time()
slow = conn(b"slow"); slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
slow.sendall(frame(2, struct.pack(">IIBBI", 1, 1, 0, 1, 100000) + s16(b"flood.x")))
b = conn(b"bystander"); time.sleep(0.3)
p = conn(b"poster")
payload = b"x"*16
one = frame(4, struct.pack(">IB", 0, 0) + s16(b"flood.x") + struct.pack(">I", len(payload)) + payload)
batch = one * 20000
for i in range(50): p.sendall(batch)   # 1,000,000 posts
time.sleep(1.0)
held = None
t0 = time.time(); os.kill(pid, signal.SIGTERM)
t1 = readall_frames(b, 0x88, 20)
print(f"bystander's GOODBYE {((t1 - t0) * 1000) if t1 else float('nan'):.1f} ms after SIGTERM, while another connection held notifications")
