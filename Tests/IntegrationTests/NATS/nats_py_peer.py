"""The reference NATS client (nats-py, from PyPI) as the other end of NotifyNATS's interoperability tests.

  nats_py_peer.py URL sub SUBJECT COUNT   prints "ready", then one JSON line per message, exits after COUNT
  nats_py_peer.py URL pub SUBJECT COUNT   publishes COUNT messages with headers, flushes, exits

JetStream key-value (each prints one JSON line):
  nats_py_peer.py URL kv-get BUCKET KEY
      binds the bucket with js.key_value and reads KEY with kv.get: {"value": hex, "revision": n, "headers": {...}}
      (headers from js.get_last_msg, since kv.get does not return them), or {"missing": true}
  nats_py_peer.py URL kv-put BUCKET create|bind KEY HEX [NAME=VALUE ...]
      creates the bucket with js.create_key_value (or binds it) and puts KEY: with kv.put, or, with headers (which
      kv.put cannot send), by publishing to the key's subject with js.publish: {"revision": n}
  nats_py_peer.py URL kv-delete BUCKET KEY
      deletes KEY with kv.delete: {"deleted": true}
"""
import asyncio
import json
import sys

import nats
from nats.js.errors import KeyNotFoundError


async def pubsub(nc, mode: str, subject: str, count: int) -> None:
    if mode == "sub":
        done = asyncio.Event()
        seen = 0

        async def handler(msg):
            nonlocal seen
            print(json.dumps({"subject": msg.subject, "data": msg.data.hex(), "headers": msg.headers or {}}), flush=True)
            seen += 1
            if seen == count:
                done.set()

        await nc.subscribe(subject, cb=handler)
        await nc.flush()
        print("ready", flush=True)
        await asyncio.wait_for(done.wait(), timeout=30)
    else:
        for i in range(count):
            await nc.publish(subject, bytes([i % 256, 0, 255]) + b"py", headers={"Seq": str(i), "From": "nats-py"})
        await nc.flush()


async def key_value(nc, mode: str, args: list) -> None:
    js = nc.jetstream()
    bucket = args[0]
    if mode == "kv-get":
        key = args[1]
        kv = await js.key_value(bucket)
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            print(json.dumps({"missing": True}), flush=True)
            return
        raw = await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
        headers = {k: v for k, v in (raw.headers or {}).items() if not k.startswith("Nats-")}
        print(json.dumps({"value": (entry.value or b"").hex(), "revision": entry.revision, "headers": headers}), flush=True)
    elif mode == "kv-put":
        how, key, value = args[1], args[2], bytes.fromhex(args[3])
        headers = dict(pair.split("=", 1) for pair in args[4:])
        kv = await (js.create_key_value(bucket=bucket) if how == "create" else js.key_value(bucket))
        if headers:
            ack = await js.publish(f"$KV.{bucket}.{key}", value, headers=headers)
            revision = ack.seq
        else:
            revision = await kv.put(key, value)
        print(json.dumps({"revision": revision}), flush=True)
    elif mode == "kv-delete":
        kv = await js.key_value(bucket)
        await kv.delete(args[1])
        print(json.dumps({"deleted": True}), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


async def main(url: str, mode: str, args: list) -> None:
    nc = await nats.connect(url, name="nats-py-peer")
    if mode in ("sub", "pub"):
        await pubsub(nc, mode, args[0], int(args[1]))
    else:
        await key_value(nc, mode, args)
    await nc.drain()


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
