"""The kernel's socket tables as tests/fakes/sockets.py decodes them: /proc/net addresses, loopback or not
(the Ray cluster's sockets read with them: tests/ray/test_loopback.py)."""

from __future__ import annotations

import ipaddress

from tests.fakes.sockets import hex_address, is_loopback


def test_socket_table_parsing_knows_loopback_from_any() -> None:
    """The /proc address decoding the Ray loopback tests rely on: loopback, v4-mapped loopback and wildcards."""
    assert hex_address("0100007F") == "127.0.0.1"
    assert hex_address("00000000") == "0.0.0.0"
    mapped = ipaddress.ip_address(hex_address("0000000000000000FFFF00000100007F"))
    assert isinstance(mapped, ipaddress.IPv6Address) and str(mapped.ipv4_mapped) == "127.0.0.1"
    assert hex_address("00000000000000000000000001000000") == "::1"
    assert [is_loopback(a) for a in ("127.0.0.1", "::ffff:127.0.0.1", "::1")] == [True] * 3
    assert [is_loopback(a) for a in ("0.0.0.0", "::", "192.0.2.2", "::ffff:192.0.2.2")] == [False] * 4
