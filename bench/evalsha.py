#!/usr/bin/env python3
"""Replays one script call that sluice made, pipelined, and prints Redis's CPU per call.

Usage: bench/evalsha.py PORT MONITOR_FILE [--calls 200000] [--pipeline 16]

MONITOR_FILE holds what `redis-cli monitor` printed while sluice decided one request; its first
FCALL or EVALSHA line is the call replayed, byte for byte but for its first two arguments, on
one connection with PIPELINE calls in flight (what `redis-benchmark -P 16` does; redis-benchmark
itself cannot send the call: one of its arguments is binary, with NUL bytes, which no
command-line argument can carry). It is replayed twice: as EVALSHA of the script, then as FCALL
of its Function library (sluice_limits_<sha1>; Redis 7). Prints "calls evalsha_us fcall_us":
Redis's own CPU time (INFO cpu) over each replay, per call; "-" for FCALL where the library is
not loaded. Never part of CI.
"""

import re
import socket
import sys


def parse_monitor_line(line):
    """The arguments of a MONITOR line, unescaped (Redis quotes each, escaping as sdscatrepr)."""
    args = []
    for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', line.split("]", 1)[1]):
        out = bytearray()
        i = 0
        while i < len(quoted):
            c = quoted[i]
            if c == "\\":
                nxt = quoted[i + 1]
                if nxt == "x":
                    out.append(int(quoted[i + 2 : i + 4], 16))
                    i += 4
                    continue
                out += {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b"}.get(
                    nxt, nxt.encode()
                )
                i += 2
                continue
            out += c.encode()
            i += 1
        args.append(bytes(out))
    return args


def command(args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class Connection:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        head, self.buf = self.buf.split(b"\r\n", 1)
        return head

    def reply(self):
        head = self.line()
        kind, rest = head[:1], head[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            if n >= 0:
                while len(self.buf) < n + 2:
                    self.buf += self.sock.recv(65536)
                value, self.buf = self.buf[:n], self.buf[n + 2 :]
                return value
            return None
        if kind == b"*":
            return [self.reply() for _ in range(max(int(rest), 0))]
        return rest

    def call(self, *args):
        self.sock.sendall(command([a if isinstance(a, bytes) else a.encode() for a in args]))
        return self.reply()


def redis_cpu_us(conn):
    info = conn.call("INFO", "cpu").decode()
    fields = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
    return (float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])) * 1e6


def replay(conn, args, calls, pipeline):
    """Redis's CPU per call of `args`, sent `calls` times, `pipeline` in flight."""
    batch = command(args) * pipeline
    conn.sock.sendall(batch)
    for _ in range(pipeline):
        conn.reply()  # a first batch: the script is loaded and the reply well formed
    before = redis_cpu_us(conn)
    for _ in range(calls // pipeline):
        conn.sock.sendall(batch)
        for _ in range(pipeline):
            conn.reply()
    return (redis_cpu_us(conn) - before) / (calls // pipeline * pipeline)


def main():
    port, monitor_file = int(sys.argv[1]), sys.argv[2]
    opts = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    calls, pipeline = int(opts.get("--calls", 200000)), int(opts.get("--pipeline", 16))
    verbs = ('"EVALSHA"', '"evalsha"', '"FCALL"', '"fcall"')
    lines = [l for l in open(monitor_file, errors="replace") if any(v in l for v in verbs)]
    if not lines:
        sys.exit("evalsha.py: no EVALSHA or FCALL in " + monitor_file)
    args = parse_monitor_line(lines[0])
    name = args[1].decode()
    sha1 = name.rsplit("_", 1)[-1]  # FCALL names sluice_limits_<sha1>; EVALSHA the sha1 itself
    rest = args[2:]
    conn = Connection(port)
    evalsha_us = replay(conn, [b"EVALSHA", sha1.encode()] + rest, calls, pipeline)
    try:
        fcall = f"{replay(conn, [b'FCALL', f'sluice_limits_{sha1}'.encode()] + rest, calls, pipeline):.2f}"
    except RuntimeError:
        fcall = "-"
    print(calls // pipeline * pipeline, f"{evalsha_us:.2f}", fcall)


if __name__ == "__main__":
    main()
