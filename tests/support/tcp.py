"""TCP connections on 127.0.0.1 as the kernel sees them (/proc/net/tcp, Linux): what a
test waits on to know that a server has read a request, or dropped a connection, instead
of sleeping and hoping it has."""
from __future__ import annotations

from dataclasses import dataclass

ESTABLISHED = 0x01


@dataclass(frozen=True)
class Conn:
    local: int  # port
    remote: int  # port
    state: int  # TCP state (ESTABLISHED = 1)
    tx_queue: int  # bytes written, not yet acknowledged by the peer
    rx_queue: int  # bytes received, not yet read by the process


def connections(local: int) -> dict[int, Conn]:
    """The IPv4 connections whose local port is `local`, by remote port (no listeners)."""
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            lport, rport = int(cols[1].split(":")[1], 16), int(cols[2].split(":")[1], 16)
            if lport == local and rport:
                tx, rx = (int(v, 16) for v in cols[4].split(":"))
                out[rport] = Conn(lport, rport, int(cols[3], 16), tx, rx)
    return out


def unread(server_port: int, clients: set[int]) -> set[int]:
    """Those of the `clients` (their local ports) whose bytes the server listening on
    `server_port` has not read yet, or whose connection it has not accepted yet."""
    conns = connections(server_port)
    return {c for c in clients if c not in conns or conns[c].rx_queue}


def open_on_server(server_port: int, clients: set[int]) -> set[int]:
    """Those of the `clients` whose connection the server still holds open."""
    conns = connections(server_port)
    return {c for c in clients if c in conns and conns[c].state == ESTABLISHED}
