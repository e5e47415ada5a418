#!/usr/bin/env python3
"""The two ends of bench/streaming: an SSE upstream and the streaming clients. Never part of CI.

  sse.py upstream PORT --events 50 --interval-ms 20
      Serves every request (keep-alive, any path) with a Server-Sent Events stream of EVENTS
      events, INTERVAL apart counted from the request's arrival, chunked, each event
      `id: <i>\\ndata: <CLOCK_MONOTONIC ns when it was written>\\n\\n` in a chunk of its own.

  sse.py client PORT --streams 16 --events 50 --interval-ms 20
      Opens STREAMS connections, started INTERVAL/STREAMS apart (so that the upstream's writes
      spread over the interval rather than all land on one tick), each asking for one stream;
      for each event, latency = CLOCK_MONOTONIC when the read that completed it returned - the
      send time in it. CLOCK_MONOTONIC is one clock for every process of the machine, so the
      figure is the time from the upstream's write to the client's read, through whatever is in
      between. Prints one line: `received expected p50_us p99_us max_us cpu_us errors`, cpu_us
      being the client's own CPU time (user + system).

Both are plain asyncio on one thread, with as little per event as possible (one write, one
regex-free parse), so that they stay a small part of what is measured: the direct run (client
straight to the upstream) is the baseline that shows how small.
"""
import argparse
import asyncio
import resource
import sys
import time


async def serve_stream(writer, events, interval_ns):
    start = time.monotonic_ns()
    for i in range(events):
        delay = start + i * interval_ns - time.monotonic_ns()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        payload = f"id: {i}\ndata: {time.monotonic_ns()}\n\n".encode()
        writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def upstream(port, events, interval_ns):
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")

    async def handle(reader, writer):
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")  # GET: no body
                close = b"connection: close" in request.lower()
                writer.write(head)
                await serve_stream(writer, events, interval_ns)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


class Stream:
    """Incremental parse of one response: head, then a chunked (or close-delimited) body."""

    def __init__(self):
        self.buf = b""
        self.head_done = False
        self.chunked = False
        self.body = b""  # decoded body not yet split into events
        self.chunk_left = 0  # bytes of the current chunk's data still to come (-1: its CRLF)
        self.done = False

    def feed(self, data):
        self.buf += data
        if not self.head_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buf = self.buf[:end].lower(), self.buf[end + 4:]
            if not head.startswith(b"http/1.1 200"):
                raise ValueError(head.split(b"\r\n")[0].decode(errors="replace"))
            self.chunked = b"transfer-encoding: chunked" in head
            self.head_done = True
        if not self.chunked:
            self.body += self.buf
            self.buf = b""
            return
        while self.buf:
            if self.chunk_left > 0:
                take = self.buf[:self.chunk_left]
                self.body += take
                self.buf = self.buf[len(take):]
                self.chunk_left -= len(take)
                if self.chunk_left == 0:
                    self.chunk_left = -1
            elif self.chunk_left == -1:
                if len(self.buf) < 2:
                    return
                self.buf = self.buf[2:]
                self.chunk_left = 0
            else:
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(self.buf[:end].split(b";")[0], 16)
                self.buf = self.buf[end + 2:]
                if size == 0:
                    self.done = True
                    return
                self.chunk_left = size

    def events(self):
        """The send times of the events completed so far."""
        *complete, self.body = self.body.split(b"\n\n")
        return [int(e[e.index(b"data: ") + 6:]) for e in complete if b"data: " in e]


async def one_stream(port, delay, events, latencies, timeout):
    await asyncio.sleep(delay)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        stream, got = Stream(), 0
        deadline = time.monotonic() + timeout
        while got < events:
            data = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
            now = time.monotonic_ns()
            if not data:
                break
            stream.feed(data)
            for sent in stream.events():
                latencies.append(now - sent)
                got += 1
    finally:
        writer.close()


async def client(port, streams, events, interval_ns):
    latencies = []
    before = resource.getrusage(resource.RUSAGE_SELF)  # leaves out the interpreter's start
    timeout = events * interval_ns / 1e9 + 10
    results = await asyncio.gather(
        *(one_stream(port, i * interval_ns / streams / 1e9, events, latencies, timeout)
          for i in range(streams)), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for e in errors[:3]:
        print(f"sse client: {type(e).__name__}: {e}", file=sys.stderr)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] // 1000 if latencies else -1
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_us = int((usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime) * 1e6)
    print(len(latencies), streams * events, pick(0.5), pick(0.99), pick(1.0) if latencies else -1,
          cpu_us, len(errors))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["upstream", "client"])
    ap.add_argument("port", type=int)
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("--streams", type=int, default=16)
    a = ap.parse_args()
    interval_ns = int(a.interval_ms * 1e6)
    if a.role == "upstream":
        asyncio.run(upstream(a.port, a.events, interval_ns))
    else:
        asyncio.run(client(a.port, a.streams, a.events, interval_ns))


if __name__ == "__main__":
    main()
