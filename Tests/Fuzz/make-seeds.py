#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (Tests/Fuzz) into OUTDIR/<target>/.

From protocol/vectors/*.hex (format: protocol/vectors/README.md: cut each line at '#', drop white space,
hex-decode), and from the hand-written seeds committed in Tests/Fuzz/seeds/<target>/.
Usage: make-seeds.py OUTDIR
"""
import hashlib
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VECTORS = ROOT / "protocol" / "vectors"
LIMITS = [131072, 64, 16, 1 << 20]  # FuzzAccumulatorChunking's header, bits 1-2 of byte 0


def read_vector(path):
    hex_digits, meta = "", {}
    for line in path.read_text(encoding="utf-8").splitlines():
        code, _, comment = line.partition("#")
        hex_digits += "".join(code.split())
        key, sep, value = comment.strip().partition(":")
        if sep and key.strip() in ("direction", "expect-error", "max-frame-length"):
            meta[key.strip()] = value.strip()
    return bytes.fromhex(hex_digits), meta


def write(directory, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main():
    out = pathlib.Path(sys.argv[1])
    targets = ["FuzzClientFrames", "FuzzServerFrames", "FuzzAccumulatorChunking", "FuzzNamesAndPatterns",
               "FuzzConfiguration", "FuzzTypedMessage", "FuzzSnapshot"]
    for target in targets:
        shutil.rmtree(out / target, ignore_errors=True)
        (out / target).mkdir(parents=True)
    streams = {"client-to-daemon": b"", "daemon-to-client": b""}
    count = 0
    for path in sorted(VECTORS.glob("*.hex")):
        data, meta = read_vector(path)
        direction = meta.get("direction", "client-to-daemon")
        count += 1
        # Frame decoders take the type byte and fields: the bytes after the length prefix.
        if len(data) > 4:
            write(out / "FuzzClientFrames", data[4:])
            write(out / "FuzzServerFrames", data[4:])
        # The accumulator takes a header (direction, limit, chunk sizes 1, 3, 7, 13), then the stream.
        limit = int(meta.get("max-frame-length", "131072"))
        flags = (1 if direction == "daemon-to-client" else 0) | (LIMITS.index(limit) << 1 if limit in LIMITS else 0)
        write(out / "FuzzAccumulatorChunking", bytes([flags, 3, 0, 2, 6, 12]) + data)
        write(out / "FuzzAccumulatorChunking", bytes([flags | 8 | 16, 0, 4]) + data)
        if "expect-error" not in meta:
            streams[direction] += data
            # Names: the name-like strings of valid vectors are in the committed seeds.
    # Whole sessions: every valid frame of one direction in one stream.
    write(out / "FuzzAccumulatorChunking", bytes([0, 2, 0, 9, 30]) + streams["client-to-daemon"])
    write(out / "FuzzAccumulatorChunking", bytes([1, 2, 0, 9, 30]) + streams["daemon-to-client"])
    write(out / "FuzzAccumulatorChunking", bytes([1 | 32, 0, 63]) + streams["daemon-to-client"][:40])
    # Frames taken in place (bits 3 and 6), one by one and in runs (bit 7), in both directions.
    for direction, first in (("client-to-daemon", 0), ("daemon-to-client", 1)):
        write(out / "FuzzAccumulatorChunking", bytes([first | 8 | 64, 2, 0, 9, 30]) + streams[direction])
        write(out / "FuzzAccumulatorChunking", bytes([first | 8 | 64 | 128, 2, 0, 9, 30]) + streams[direction])
    # Hand-written seeds.
    for target in targets:
        committed = HERE / "seeds" / target
        if committed.is_dir():
            for path in sorted(committed.iterdir()):
                if path.is_file():
                    write(out / target, path.read_bytes())
    example = ROOT / "systemd" / "notifyd.conf.example"
    if example.is_file():
        write(out / "FuzzConfiguration", example.read_bytes())
    # The committed snapshots of the previous formats: whole (mode 0) and as a body to be framed (mode 1).
    for version in (1, 2):
        fixture = ROOT / "Tests" / "NotifyServerTests" / "Fixtures" / f"snapshot-v{version}.bin"
        if fixture.is_file():
            data = fixture.read_bytes()
            write(out / "FuzzSnapshot", b"\x00" + data)
            write(out / "FuzzSnapshot", b"\x01" + data[20:-8])
    total = sum(len(list((out / t).iterdir())) for t in targets)
    print(f"seeds: {count} vectors -> {total} files in {out}/<target>/")


if __name__ == "__main__":
    main()
