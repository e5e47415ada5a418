#!/usr/bin/env python3
"""A demo backend for sluice: answers every request with 200 and records when each arrived.

GET /__arrivals returns the arrival times (unix seconds, one per line) and is not itself recorded.
Used by scripts/demo and docker/compose.yaml. Standard library only.
"""
import argparse
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

arrivals = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/__arrivals":
            with lock:
                body = "".join(f"{t:.6f}\n" for t in arrivals).encode()
        else:
            with lock:
                arrivals.append(time.time())
            body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", default="127.0.0.1:9000", help="host:port")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    # As a container's PID 1 the process gets no default SIGTERM handler: without this one,
    # `docker compose down` waits its 10 s and then kills it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
