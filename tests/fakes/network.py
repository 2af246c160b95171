"""The test process reaches loopback only: a connect or a name lookup for anything else is refused before it
goes out, with an error naming the address.

``loopback_only()`` patches ``socket.socket.connect`` and ``connect_ex`` (which ``socket.create_connection``,
asyncio, httpcore and anyio all end in) and ``socket.getaddrinfo`` (where a lookup of a name would send a
DNS query). Allowed: AF_UNIX and every other non-IP family; 127.0.0.0/8, ::1 and v4-mapped ::ffff:127.x;
names that /etc/hosts maps to loopback addresses only (``localhost``, and usually the machine's own name),
read from the file itself so that deciding sends no query. Refused: anything else, with
``OffLoopbackConnection``, a ``ConnectionRefusedError`` (an ``OSError``), so code that handles an
unreachable network sees one.

Only this process's Python sockets are covered: child processes and C-level sockets (gRPC inside Ray's
core, llama.cpp) are not; Ray and the model server are kept on loopback by their own settings.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest

HOSTS = Path("/etc/hosts")
IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)

# The functions the guard wraps, as they were: the guard calls these for what it lets through.
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


class OffLoopbackConnection(ConnectionRefusedError):
    """A test tried to reach an address outside loopback; nothing was sent."""

    def __init__(self, target: str, what: str) -> None:
        self.target = target
        super().__init__(
            f"the test process may reach loopback only: {what} {target} refused before anything was sent "
            "(tests/fakes/network.py). Serve a fake on 127.0.0.1 (tests.fakes.httpserver.serve) or use "
            "httpx.MockTransport."
        )


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") is not part of it
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@cache
def loopback_names(hosts: Path = HOSTS) -> frozenset[str]:
    """The names ``hosts`` maps to loopback addresses only (lower case)."""
    addresses: dict[str, set[str]] = {}
    try:
        text = hosts.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        address, *names = fields
        for name in names:
            addresses.setdefault(name.lower(), set()).add(address)
    return frozenset(name for name, found in addresses.items()
                     if all((ip := _ip(a)) is not None and ip.is_loopback for a in found))


def _loopback_name(name: str) -> bool:
    return name.lower().rstrip(".") in loopback_names()


def is_loopback(host: str | bytes | None) -> bool:
    """Whether ``host`` (an address or a name) is this machine's loopback, decided without any DNS query."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not host:
        return False
    ip = _ip(host)
    if ip is not None:
        return ip.is_loopback
    return _loopback_name(host)


def _target(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return repr(address)


def _check_connect(sock: socket.socket, address: Any) -> None:
    if sock.family not in IP_FAMILIES:
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if not isinstance(host, str | bytes) or not is_loopback(host):
        raise OffLoopbackConnection(_target(address), "a connection to")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_connect(self, address)
    return _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_connect(self, address)
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    """Numbers and loopback names resolve as usual (no query goes out for them); any other name is refused."""
    text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    if text is None or text == "" or _ip(text) is not None or _loopback_name(text):
        return _getaddrinfo(host, port, *args, **kwargs)
    raise OffLoopbackConnection(f"{text}:{port}", "a name lookup for")


@contextmanager
def loopback_only() -> Iterator[None]:
    """Refuse every connection and name lookup outside loopback in this process while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _guarded_connect)
        patch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
        patch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
        yield


def guarded() -> bool:
    """Whether the guard is in place now."""
    return socket.socket.connect is _guarded_connect and socket.getaddrinfo is _guarded_getaddrinfo
