#!/usr/bin/env python3
"""The client side of bench/memory: many connections held open at once. Never part of CI.

  conns.py idle PORT N
      Opens N connections to 127.0.0.1:PORT (at most 200 connecting at once), sends one
      `GET /idle` on each and reads its whole response (Content-Length), then leaves each open
      and silent: N idle keep-alive connections.

  conns.py held PORT N PATH
      Opens N connections and sends `GET PATH` on each without waiting for an answer: with a
      shaping limit on PATH, N held requests (or one forwarded and N - 1 held).

Either way it prints `ready N` (N: the connections open) once every request is sent (and, for
idle, answered), then keeps everything open until its stdin closes, and exits. The process's
own file limit must allow N descriptors.
"""
import asyncio
import sys

REQUEST = b"GET %s HTTP/1.1\r\nHost: bench\r\n\r\n"


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)


async def open_one(port, path, wait_answer, gate, writers):
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST % path)
        await writer.drain()
        if wait_answer:
            await read_response(reader)
    writers.append((reader, writer))


async def main():
    mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    path = sys.argv[4].encode() if mode == "held" else b"/idle"
    gate = asyncio.Semaphore(200)
    writers = []
    await asyncio.gather(*(open_one(port, path, mode == "idle", gate, writers) for _ in range(n)))
    print(f"ready {len(writers)}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for _, writer in writers:
        writer.close()


asyncio.run(main())
