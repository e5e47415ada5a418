#!/usr/bin/env python3
"""Drives the worked example through sluice and draws what the backend saw. See scripts/demo."""
import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time

from local_ports import free_port, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))


def fire(port, results, index):
    """One request on its own connection; records (sent, status, answered)."""
    sent = time.time()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/infer")
        status = conn.getresponse().status
        conn.close()
    except OSError:
        status = 0
    results[index] = (sent, status, time.time())


def burst(port, count, results, offset):
    threads = [threading.Thread(target=fire, args=(port, results, offset + i)) for i in range(count)]
    for t in threads:
        t.start()
    return threads


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", required=True)
    parser.add_argument("--capacity", type=int, default=50)
    parser.add_argument("--flow-rate", type=float, default=5)
    args = parser.parse_args()

    upstream_port, proxy_port = free_port(), free_port()
    work = tempfile.mkdtemp(prefix="sluice-demo.")
    config = os.path.join(work, "sluice.yaml")
    with open(config, "w") as f:
        f.write(f"""server: {{ listen: "127.0.0.1:{proxy_port}" }}
upstream: {{ url: "http://127.0.0.1:{upstream_port}" }}
rate-limit:
  store: memory
  fallback: {{ algorithm: LEAKY_BUCKET, capacity: {args.capacity}, flowRate: {args.flow_rate} }}
logging: {{ level: warn }}
admin: {{ enabled: false }}
""")
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "demo_upstream.py"),
                          "--listen", f"127.0.0.1:{upstream_port}"]),
        subprocess.Popen([args.sluice, "--config", config],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        wait_port(upstream_port, "demo")
        wait_port(proxy_port, "demo")
        results = [None] * 80
        start = time.time()
        threads = burst(proxy_port, 30, results, 0)
        time.sleep(0.05)  # let the first burst be queued before the second arrives
        threads += burst(proxy_port, 50, results, 30)
        for t in threads:
            t.join()
        conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=5)
        conn.request("GET", "/__arrivals")
        arrivals = [float(x) for x in conn.getresponse().read().split()]
        report(start, results, arrivals, args)
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def report(start, results, arrivals, args):
    seconds = int(max([a - start for a in arrivals] + [r[2] - start for r in results])) + 1
    sent = [0] * seconds
    admitted = [0] * seconds
    rejected = [0] * seconds
    received = [0] * seconds
    for s, status, _ in results:
        sec = int(s - start)
        sent[sec] += 1
        if status == 200:
            admitted[sec] += 1
        elif status == 429:
            rejected[sec] += 1
    for a in arrivals:
        received[int(a - start)] += 1
    held = []
    waiting = sum(admitted) - 0
    for sec in range(seconds):
        waiting -= received[sec]
        held.append(waiting)
    print(f"capacity {args.capacity}, flowRate {args.flow_rate}/s: a burst of 30, then 50 more\n")
    print(f"{'second':>6} {'sent':>5} {'admitted':>8} {'rejected':>8} {'held':>5} {'backend':>7}  backend per second")
    for sec in range(seconds):
        bar = "#" * received[sec]
        print(f"{sec:>6} {sent[sec]:>5} {admitted[sec]:>8} {rejected[sec]:>8} {held[sec]:>5} {received[sec]:>7}  {bar}")
    print(f"\ntotal: sent {sum(sent)}, admitted {sum(admitted)}, rejected {sum(rejected)}, "
          f"backend received {len(arrivals)}; most in any one second: {max(received)}")


if __name__ == "__main__":
    main()
