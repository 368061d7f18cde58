"""The reference NATS client (nats-py, from PyPI) as the other end of NotifyNATS's interoperability test.

  nats_py_peer.py URL sub SUBJECT COUNT   prints "ready", then one JSON line per message, exits after COUNT
  nats_py_peer.py URL pub SUBJECT COUNT   publishes COUNT messages with headers, flushes, exits
"""
import asyncio
import json
import sys

import nats


async def main(url: str, mode: str, subject: str, count: int) -> None:
    nc = await nats.connect(url, name="nats-py-peer")
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
    await nc.drain()


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
