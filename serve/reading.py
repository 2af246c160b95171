"""A request body read into a :class:`ClientRequest`, reading only what the conversation's last request did
not hold.

A client resends its whole history with every request; at 100 turns that is some 400 messages (700 kB)
whose depth walk, shape checks, reading into items and text-form exchanges cost the server about 2.5 ms a
request (bench/serve.py). Each conversation's last body is kept here (up to ``KEYS`` of them): its messages
as ``orjson`` writes them, what checking and reading them gave, and the depth of their list. A body whose
messages begin with exactly those (the same JSON, compared as ``orjson`` writes it: every string, number
type and key alike) has only its further messages walked, checked and read; the result is what reading the
whole body gives (``serve/bodies.py``, ``serve/shapes.py``, ``serve/protocol.py``, ``serve/textform.py``), the
same refusals too, since a message the last body held passed every check then and reads the same now.
A history that edits, drops or reorders a message is read whole, as is a body ``orjson`` does not parse
(``json`` parses it: NaN, integers over 64 bits), and the conversation's entry is replaced.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vak_context.serve.bodies import MAX_DEPTH, check_depth, depth, load
from vak_context.serve.protocol import ClientRequest, Protocol, Read, anthropic_from, openai_from
from vak_context.serve.shapes import CHECKS
from vak_context.serve.textform import Exchanged, exchanges_from

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency; without it every body is read whole
    orjson = None  # type: ignore[assignment]

KEYS = 64  # conversations whose last body is kept
KEPT_BYTES = 64 * 1024 * 1024  # and at most this many bytes of their messages, all together
READERS: dict[Protocol, Callable[[Mapping[str, Any], Read, int], tuple[ClientRequest, Read]]] = {
    "openai": openai_from, "anthropic": anthropic_from}


@dataclass(frozen=True)
class _Last:
    """One conversation's last body: its messages as ``orjson`` writes them, how many, the depth of their
    list, what reading them gave and where its text-form exchanges stood."""

    listed: bytes
    count: int
    depth: int
    read: Read
    exchanged: Exchanged


class Reader:
    """Reads the bodies of one server's requests; each conversation's last one is kept (``KEYS``,
    ``KEPT_BYTES``), under its protocol, session header and first messages."""

    def __init__(self, keys: int = KEYS, kept_bytes: int = KEPT_BYTES) -> None:
        self._keys, self._kept_bytes = keys, kept_bytes
        self._last: OrderedDict[tuple[Any, ...], _Last] = OrderedDict()
        self._bytes = 0

    def read(self, protocol: Protocol, data: bytes, header: str | None = None, *,
             max_depth: int = MAX_DEPTH) -> ClientRequest:
        """``data`` read as ``protocol``'s request: what ``parse``, ``CHECKS``, the protocol's reader and
        ``with_text_exchanges`` give, and the same refusals."""
        body, exact = load(data, max_depth=max_depth)
        messages: Any = body.get("messages")
        listed = _listed(messages) if exact else None
        if listed is None:  # a body the memo cannot compare: read whole, as before
            check_depth(depth(body), max_depth)
            return self._read(protocol, body, None, None)
        key = (protocol, header, orjson.dumps(messages[:2]))
        last = self._last.pop(key, None)
        if last is not None:
            self._bytes -= len(last.listed)
            if not _extends(listed, last):
                last = None
        start = last.count if last is not None else 0
        rest = {**body, "messages": []}
        deepest = depth(messages[start:])
        check_depth(max(depth(rest), 1 + max(deepest, last.depth if last is not None else 0)), max_depth)
        return self._read(protocol, body, last, key, listed, deepest)

    def _read(self, protocol: Protocol, body: dict[str, Any], last: _Last | None, key: tuple[Any, ...] | None,
              listed: bytes = b"", deepest: int = 0) -> ClientRequest:
        start = last.count if last is not None else 0
        CHECKS[protocol](body, start)
        request, read = READERS[protocol](body, last.read if last is not None else Read(), start)
        items, exchanged = exchanges_from(request.items, last.exchanged if last is not None else Exchanged())
        if key is not None:
            self._keep(key, _Last(listed, len(body["messages"]), max(deepest, last.depth if last is not None else 0), read,
                                  exchanged))
        return request if items == request.items else replace(request, items=items)

    def _keep(self, key: tuple[Any, ...], last: _Last) -> None:
        self._last[key] = last
        self._bytes += len(last.listed)
        while self._last and (len(self._last) > self._keys or self._bytes > self._kept_bytes):
            self._bytes -= len(self._last.popitem(last=False)[1].listed)


def _listed(messages: Any) -> bytes | None:
    """The messages as ``orjson`` writes them (a list that is not empty), else None."""
    if orjson is None or not isinstance(messages, list) or not messages:
        return None
    try:
        return orjson.dumps(messages)
    except (TypeError, orjson.JSONEncodeError):  # pragma: no cover - what orjson parsed it writes
        return None


def _extends(listed: bytes, last: _Last) -> bool:
    """Whether messages written as ``listed`` begin with the ``last`` body's: its list's text less its closing
    bracket, then the next message's comma or the end of the list (each message is whole JSON, so the
    same text is the same messages)."""
    head = len(last.listed) - 1
    return listed.startswith(memoryview(last.listed)[:head]) and listed[head:head + 1] in (b",", b"]")
