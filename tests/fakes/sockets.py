"""Which sockets a process tree listens on, read from the kernel's socket tables (no ``ss`` needed).

``bound_sockets`` reads ``/proc/<pid>/net/{tcp,tcp6,udp,udp6}`` and maps each socket's inode to the
processes of a tree (``process_tree``) through ``/proc/<pid>/fd``; ``is_loopback`` says whether an
address (v4, v6, or v4-mapped v6) is a loopback one.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

TCP_LISTEN = "0A"
UDP_UNCONNECTED = "07"


@dataclass(frozen=True)
class Socket:
    proto: str
    address: str
    port: int
    pid: int
    process: str


def hex_address(text: str) -> str:
    """An address as /proc/net prints it: 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(text)
    host = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(host))


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() or "?"
    except OSError:
        return "?"


def bound_sockets(pids: set[int], netns_pid: int) -> list[Socket]:
    """Every TCP socket listening and every UDP socket bound (unconnected) that one of ``pids`` holds."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                owner[target[8:-1]] = pid
    found = []
    for proto, state in (("tcp", TCP_LISTEN), ("tcp6", TCP_LISTEN), ("udp", UDP_UNCONNECTED), ("udp6", UDP_UNCONNECTED)):
        lines = Path(f"/proc/{netns_pid}/net/{proto}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, st, inode = fields[1], fields[3], fields[9]
            if st != state or inode not in owner:
                continue
            address, port = local.split(":")
            pid = owner[inode]
            found.append(Socket(proto, hex_address(address), int(port, 16), pid, process_name(pid)))
    return found
