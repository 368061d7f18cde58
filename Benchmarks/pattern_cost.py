#!/usr/bin/env python3
"""What patterns cost a running daemon (issue 15): RSS per pattern label, and daemon CPU per post to a name
that all of them could match.

usage: pattern_cost.py SOCKET DAEMON_PID COUNT LABELS MODE
  MODE unique:    COUNT patterns of LABELS one-letter labels sharing no trie node (the memory worst case)
  MODE branching: COUNT patterns of LABELS labels, `*` where bit (position % 12) of the index is set, all
                  matching one name (the matching worst case: a post visits every node)
Run as root (exempt from pattern-labels-per-uid), against a release daemon with nothing else connected."""
import socket, struct, sys, time
sock_path, pid, count, labels, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
from wire import frame, hello, s16
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) * 1024
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0
class C:
    def __init__(s):
        s.s = socket.socket(socket.AF_UNIX); s.s.connect(sock_path); s.buf = b""
        s.s.sendall(hello(b"patmem")); s.read()
    def read(s):
        while True:
            if len(s.buf) >= 4:
                n = struct.unpack(">I", s.buf[:4])[0]
                if len(s.buf) >= 4 + n:
                    body = s.buf[4:4+n]; s.buf = s.buf[4+n:]; return body
            s.buf += s.s.recv(1 << 20)
sub = C(); sub.s.settimeout(20)
time.sleep(1.5); before = rss()
out = b""
for i in range(count):
    if mode == "unique":
        parts = [f"u{i}"] + ["*" if p % 2 else "l" for p in range(1, labels)]
    else:
        parts = ["*" if (i >> (p % 12)) & 1 else "l" for p in range(labels)]
    out += frame(2, struct.pack(">IIBBI", i+1, i+1, 0, 0, 0) + s16(".".join(parts).encode()))
sub.s.sendall(out)
errors = 0
for i in range(count):
    b = sub.read()
    if b[0] == 0x8F: errors += 1
if errors: print(f"  {errors} SUBSCRIBEs refused, e.g. {b}")
time.sleep(1.5); after = rss()
print(f"{mode}: {count} patterns x {labels} labels ({count*labels} labels): RSS +{after-before} B = {(after-before)/(count*labels):.0f} B/label, {(after-before)/count:.0f} B/pattern")
poster = C(); poster.s.settimeout(20)
name = ".".join("l" for p in range(labels)).encode()
posts = 200
c0 = cpu(); t0 = time.time()
for k in range(posts):
    poster.s.sendall(frame(4, struct.pack(">IB", k+1, 1) + s16(name) + struct.pack(">I", 1) + b"x"))
    while True:
        b = poster.read()
        if b[0] == 0x83: break
t1 = time.time(); c1 = cpu()
print(f"  {posts} acknowledged posts to a name matching {'every' if mode != 'unique' else 'no'} pattern: {(t1-t0)/posts*1e6:.0f} us per round trip, daemon CPU {(c1-c0)/posts*1e6:.0f} us per post")
