"""A TCP port for a server a test starts (Jupyter, Voilà, torchrun's rendezvous, slurmctld).

A port is chosen before the server binds it, so something else can take it in between. The usual
recipe (bind port 0, read the port, close) picks from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on Linux), the same range every ``bind(0)``
and every outgoing connection draws from: on a machine running the suite on two workers, gloo's
listeners and TCPStores on the other worker draw from it too. CI once lost the race: Voilà found the
port taken, moved to another one (its ``port_retries``), and the test's connection check reached the
other listener, not Voilà (``ERR_CONNECTION_REFUSED`` once that listener closed).

:func:`free_port` picks at random *below* the ephemeral range, where no ``bind(0)`` and no outgoing
connection lands, and returns one that binds now. Servers are started with their port retries off,
so a port taken all the same makes the server fail (and the test say so), never serve elsewhere.
"""

from __future__ import annotations

import random
import socket

FIRST = 20000   # above the well-known and registered ports most services use


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (first, last); Linux's default where it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low, high = (int(v) for v in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that binds now and lies below the ephemeral range (see the module).

    Raises:
        RuntimeError: 200 random ports in [FIRST, ephemeral start) were all taken.
    """
    low = ephemeral_range()[0]
    first = FIRST if low - FIRST >= 1000 else 1024
    for _ in range(200):
        port = random.randrange(first, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port on {host} in {first}..{low - 1} after 200 tries")
