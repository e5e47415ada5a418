#!/usr/bin/env python3
"""The training run of a profile-guided build (scripts/build release-pgo): drives an instrumented
sluice through its usual path so that the compiler learns which code is hot.

Starts on 127.0.0.1 only: an upstream of its own that answers each request with a small 200 in
one write (as nginx does; a head and a body in two writes would meet the peer's delayed ACK),
then the given sluice on the memory store and, when redis-server is on PATH, on a redis-server
of its own (free port, temp dir, no persistence). Each gets keep-alive GETs from a few connections for --seconds, then a
SIGTERM, and must exit by itself: the profile is written at exit. Standard library only.
"""
import argparse
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from local_ports import free_port, wait_port

RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: pgo-train\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n")


def upstream(listener):
    """Answers every request head (GETs only: no body) with RESPONSE, keep-alive."""

    def serve(conn):
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    data = conn.recv(65536)
                    if not data:
                        return
                    pending += data
                _, _, pending = pending.partition(b"\r\n\r\n")
                conn.sendall(RESPONSE)

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # closed: the run is over
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def config(port, upstream_port, store, redis_port):
    # A limit that refuses nothing, as bench/run's: every request takes the whole path.
    return f"""server: {{ listen: "127.0.0.1:{port}", workers: 1 }}
upstream: {{ url: "http://127.0.0.1:{upstream_port}" }}
rate-limit:
  store: {store}
  fallback: {{ algorithm: LEAKY_BUCKET, capacity: 100000000, flowRate: 10000000, mode: police }}
  redis: {{ host: 127.0.0.1, port: {redis_port}, ttl: 60s, timeout: 500ms }}
logging: {{ level: warn, access-log: false }}
admin: {{ enabled: false }}
"""


def drive(port, seconds, connections):
    """Keep-alive GETs on `connections` connections for `seconds`; returns how many got a 200."""
    done = [0] * connections
    end = time.time() + seconds

    def one(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        while time.time() < end:
            conn.request("GET", f"/train/{i}")
            response = conn.getresponse()
            response.read()
            done[i] += response.status == 200

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


def run_sluice(binary, work, name, upstream_port, store, redis_port, args):
    port = free_port()
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(config(port, upstream_port, store, redis_port))
    proc = subprocess.Popen([binary, "--config", path])
    try:
        wait_port(port, "pgo_train")
        ok = drive(port, args.seconds, args.connections)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            sys.exit(f"pgo_train: sluice ({store}) did not exit within 15 s of SIGTERM")
    if code != 0:
        sys.exit(f"pgo_train: sluice ({store}) exited with {code}")
    if ok == 0:
        sys.exit(f"pgo_train: no request through sluice ({store}) was answered 200")
    print(f"pgo_train: {ok} requests through sluice on the {store} store", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sluice", help="the instrumented binary")
    parser.add_argument("--seconds", type=float, default=4.0, help="per store")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="sluice-pgo.")
    children = []
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        upstream_port = listener.getsockname()[1]
        threading.Thread(target=upstream, args=(listener,), daemon=True).start()
        redis_port = free_port()
        run_sluice(args.sluice, work, "memory", upstream_port, "memory", redis_port, args)
        if shutil.which("redis-server"):
            children.append(subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
            wait_port(redis_port, "pgo_train")
            run_sluice(args.sluice, work, "redis", upstream_port, "redis", redis_port, args)
        else:
            print("pgo_train: no redis-server: the Redis store is not trained", file=sys.stderr)
    finally:
        listener.close()  # the upstream's accept loop ends
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
