"""The test process reaches loopback only (tests/fakes/network.py, installed for the session by tests/conftest.py).

A refused connection is refused before the connect system call: the socket is still unbound afterwards
(the kernel binds a local port on the way to sending a SYN or a datagram), and the real ``connect`` was never
called. A name outside loopback is refused before the resolver is asked, so no DNS query goes out either.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import network
from tests.fakes.network import OffLoopbackConnection, guarded, is_loopback

OUTSIDE = [("192.0.2.1", 9), ("10.255.255.1", 9), ("8.8.8.8", 53)]  # TEST-NET-1, a private address, a public one


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def _recorder(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Record every call the guard lets through to the real function ``name`` (and make it)."""
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(network, name)

    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1] if name.startswith("_connect") else args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(network, name, record)
    return calls


def _assert_nothing_sent(sock: socket.socket) -> None:
    """No connect reached the kernel: it binds a local port before sending a SYN or a datagram."""
    assert sock.getsockname()[1] == 0
    with pytest.raises(OSError) as not_connected:
        sock.getpeername()
    assert not_connected.value.errno == errno.ENOTCONN


def test_the_guard_is_on_in_every_test() -> None:
    assert guarded()


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM], ids=["tcp", "udp"])
@pytest.mark.parametrize("address", OUTSIDE, ids=[a for a, _ in OUTSIDE])
def test_a_connection_outside_loopback_is_refused_before_anything_is_sent(
        monkeypatch: pytest.MonkeyPatch, address: tuple[str, int], kind: int) -> None:
    connects, connect_exs = _recorder(monkeypatch, "_connect"), _recorder(monkeypatch, "_connect_ex")
    with socket.socket(socket.AF_INET, kind) as sock:
        with pytest.raises(OffLoopbackConnection, match=rf"{address[0]}:{address[1]} refused before anything"):
            sock.connect(address)
        with pytest.raises(OffLoopbackConnection, match=address[0]):
            sock.connect_ex(address)
        _assert_nothing_sent(sock)
    assert connects == connect_exs == []


@pytest.mark.parametrize("address", [("2001:db8::1", 9, 0, 0), ("::ffff:192.0.2.1", 9, 0, 0)],
                         ids=["documentation-v6", "v4-mapped"])
def test_an_ipv6_connection_outside_loopback_is_refused(address: tuple[str, int, int, int]) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        with pytest.raises(OffLoopbackConnection, match=address[0]):
            sock.connect(address)
        _assert_nothing_sent(sock)


def test_a_name_outside_loopback_is_refused_before_any_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """``getaddrinfo`` (what create_connection, asyncio and httpx resolve with) refuses the name itself."""
    asked = _recorder(monkeypatch, "_getaddrinfo")
    with pytest.raises(OffLoopbackConnection, match=r"a name lookup for example\.org:443"):
        socket.getaddrinfo("example.org", 443)
    with pytest.raises(OffLoopbackConnection, match=r"api\.openai\.com:443"):
        socket.create_connection(("api.openai.com", 443), timeout=1)
    assert asked == []


def test_an_http_client_gets_a_connect_error_naming_the_address() -> None:
    """httpx sees an OSError, as from an unreachable network: its ConnectError carries the guard's reason."""
    with pytest.raises(httpx.ConnectError, match=r"192\.0\.2\.1:9 refused before anything was sent"):
        httpx.get("http://192.0.2.1:9/v1/models", trust_env=False, timeout=5)
    with pytest.raises(httpx.ConnectError, match=r"example\.org:80"):
        httpx.get("http://example.org/", trust_env=False, timeout=5)


def _causes(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and everything it was raised from, exception groups opened."""
    found: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or e in found:
            continue
        found.append(e)
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return found


async def test_an_async_http_client_is_refused_too() -> None:
    """anyio tries each address and reports "All connection attempts failed"; the guard's refusal is the cause."""
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get("http://10.255.255.1:9/health")
    guard = [e for e in _causes(refused.value) if isinstance(e, OffLoopbackConnection)]
    assert guard and guard[0].target == "10.255.255.1:9"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost"])
def test_loopback_still_connects(host: str) -> None:
    """A connection to 127.0.0.0/8, by address or as localhost, goes through and carries bytes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1" if host == "localhost" else host, 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection((host, port), timeout=5) as client:
            served, _ = listener.accept()
            with served:
                client.sendall(b"ping")
                assert served.recv(4) == b"ping"


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to connect to")
def test_ipv6_loopback_still_connects() -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as listener:
        listener.bind(("::1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as client:
            assert client.connect_ex(("::1", port, 0, 0)) == 0
            served, _ = listener.accept()
            served.close()


def test_unix_sockets_are_not_touched(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            served, _ = listener.accept()
            with served:
                client.sendall(b"x")
                assert served.recv(1) == b"x"


def test_what_counts_as_loopback() -> None:
    assert [is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "localhost",
                                     "LOCALHOST.", b"127.0.0.1")] == [True] * 7
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "192.0.2.1", "::ffff:192.0.2.1", "fe80::1%lo",
                                     "example.org", "localhost.example.org", "", None)] == [False] * 9


def test_names_are_loopback_only_as_etc_hosts_maps_them(tmp_path: Path) -> None:
    """A name counts when the hosts file maps it to loopback addresses only; read from the file, no query."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost box  # this machine\n::1 localhost ip6-localhost\n"
                     "10.0.0.5 box nas\n# 127.0.0.1 commented\n\n")
    assert network.loopback_names(hosts) == {"localhost", "ip6-localhost"}
    assert network.loopback_names(tmp_path / "missing") == frozenset()


def test_the_refusal_is_an_os_error_code_can_handle() -> None:
    """Code that treats an unreachable network as an OSError keeps working under the guard."""
    with socket.socket() as sock:
        try:
            sock.connect(("192.0.2.1", 9))
        except ConnectionRefusedError as exc:
            assert isinstance(exc, OSError) and isinstance(exc, OffLoopbackConnection)
            assert exc.target == "192.0.2.1:9"
        else:
            raise AssertionError("the connection was not refused")
