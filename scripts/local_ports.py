"""Ports on 127.0.0.1 for the scripts that start servers of their own (demo.py, pgo_train.py)."""
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, who, deadline=10.0):
    """Returns once something listens on `port`; exits, naming `who`, after `deadline` s."""
    end = time.time() + deadline
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{who}: nothing listens on 127.0.0.1:{port}")
