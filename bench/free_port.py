"""A free TCP port (on 127.0.0.1 by default) for a daemon to be started on.

Drawn at random below the kernel's ephemeral range and checked by binding
it: a port that bind(0) handed out could be taken, before the daemon binds
it, by any outgoing connection on the machine. Run as a script, prints one.
"""

import pathlib
import random
import socket


def _ephemeral_port_range():
    try:
        low, high = pathlib.Path(
            "/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host="127.0.0.1"):
    """A free port on `host`, drawn below the ephemeral range."""
    ephemeral_low, ephemeral_high = _ephemeral_port_range()
    low, high = 10000, ephemeral_low - 1
    if high - low < 1000:
        low, high = ephemeral_high + 1, 65535
    if high - low < 1000:
        low, high = 1024, 65535
    for _ in range(100):
        port = random.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port on {host}")


if __name__ == "__main__":
    print(free_port())
