"""A request body read into a :class:`ClientRequest`, reading only what the conversation's last request did
not hold.

A client resends its whole history with every request; at 100 turns that is some 400 messages (700 kB)
whose parse, depth walk, shape checks, reading into items and text-form exchanges cost the server about
3 ms a request (bench/serve.py). So each conversation's last body is kept here (``KEYS`` of them, at most
``KEPT_CHARS`` of text in all): its text up to the end of its last message, where that is, the members
before its messages, the messages parsed, the depth of their list, what reading them gave and where its
text-form exchanges stood. A body that begins with exactly that text (the same characters: nothing in
it can differ) is parsed on from there, message by message and member by member (``json``'s own scanner),
and only its further messages are walked, checked and read. The result is what reading the whole body
gives (``serve/bodies.py``, ``serve/shapes.py``, ``serve/protocol.py``, ``serve/textform.py``), refusals
included, since a message the last body held passed every check then and reads the same now. Anything
else (a history that edits, drops or reorders a message, a body that is not UTF-8, a parse that stops)
is read whole, and where its messages end is found as it is parsed, for the next body.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vak_context.serve.bodies import MAX_DEPTH, check_depth, depth, load
from vak_context.serve.protocol import ClientRequest, Protocol, Read, anthropic_from, openai_from
from vak_context.serve.shapes import CHECKS
from vak_context.serve.textform import Exchanged, exchanges_from

KEYS = 64  # conversations whose last body is kept
KEPT_CHARS = 32 * 1024 * 1024  # and at most this much of their text, all together
READERS: dict[Protocol, Callable[[Mapping[str, Any], Read, int], tuple[ClientRequest, Read]]] = {
    "openai": openai_from, "anthropic": anthropic_from}
_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json.loads skips it
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class _Last:
    """One conversation's last body: its text up to the end of its last message, the members before its
    messages, the messages, the depth of their list, what reading them gave and where its text-form
    exchanges stood."""

    text: str
    head: dict[str, Any]
    messages: list[Any]
    depth: int
    read: Read
    exchanged: Exchanged


@dataclass(frozen=True)
class _Parsed:
    body: dict[str, Any]
    head: dict[str, Any]  # the members before "messages"
    end: int  # where the last message ends in the text
    start: int  # the messages the last body held


class Reader:
    """Reads the bodies of one server's requests; each conversation's last one is kept (``KEYS``,
    ``KEPT_CHARS``), under its protocol and session header (several under one header: the text tells
    them apart)."""

    def __init__(self, keys: int = KEYS, kept_chars: int = KEPT_CHARS) -> None:
        self._keys, self._kept_chars = keys, kept_chars
        self._last: OrderedDict[tuple[Any, ...], _Last] = OrderedDict()
        self._chars = 0
        self._made = 0  # names kept bodies apart under one protocol and header

    def read(self, protocol: Protocol, data: bytes, header: str | None = None, *,
             max_depth: int = MAX_DEPTH) -> ClientRequest:
        """``data`` read as ``protocol``'s request: what ``parse``, ``CHECKS``, the protocol's reader and
        ``with_text_exchanges`` give, and the same refusals."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        key, last, parsed = None, None, None
        if text is not None:
            key, last = self._find(protocol, header, text)
            parsed = _parse(text, last)
        if parsed is None:
            body = load(data, max_depth=max_depth)  # its refusal, or a body this parse does not take
            check_depth(depth(body), max_depth)
            return self._read(protocol, body, None, None)
        messages = parsed.body["messages"]
        deepest = depth(messages[parsed.start:])
        if last is not None:
            deepest = max(deepest, last.depth)
        check_depth(max(depth({**parsed.body, "messages": []}), 1 + deepest), max_depth)
        assert text is not None
        return self._read(protocol, parsed.body, last, key or (protocol, header, self._new_name()),
                          (text[:parsed.end], parsed.head, deepest))

    def _read(self, protocol: Protocol, body: dict[str, Any], last: _Last | None, key: tuple[Any, ...] | None,
              kept: tuple[str, dict[str, Any], int] | None = None) -> ClientRequest:
        start = len(last.messages) if last is not None else 0
        CHECKS[protocol](body, start)
        request, read = READERS[protocol](body, last.read if last is not None else Read(), start)
        items, exchanged = exchanges_from(request.items, last.exchanged if last is not None else Exchanged())
        if key is not None and kept is not None:
            text, head, deepest = kept
            self._keep(key, _Last(text, head, body["messages"], deepest, read, exchanged))
        return request if items == request.items else replace(request, items=items)

    def _find(self, protocol: Protocol, header: str | None, text: str) -> tuple[tuple[Any, ...] | None, _Last | None]:
        """The kept body under ``protocol`` and ``header`` that ``text`` begins with (taken out), and its key."""
        for key, last in reversed(self._last.items()):
            if key[0] == protocol and key[1] == header and text.startswith(last.text):
                del self._last[key]
                self._chars -= len(last.text)
                return key, last
        return None, None

    def _new_name(self) -> int:
        self._made += 1
        return self._made

    def _keep(self, key: tuple[Any, ...], last: _Last) -> None:
        self._last[key] = last
        self._chars += len(last.text)
        while self._last and (len(self._last) > self._keys or self._chars > self._kept_chars):
            self._chars -= len(self._last.popitem(last=False)[1].text)


def _parse(text: str, last: _Last | None) -> _Parsed | None:
    """The body ``text`` is, as ``json.loads`` reads it, and where its last message ends; read on from the
    end of ``last``'s messages when it begins with ``last``'s text. None for a body whose ``messages`` is not
    a list of messages (once), or anything this parse stops at (``load`` then reads it, or refuses it)."""
    try:
        if last is not None:
            messages, head, at, start = list(last.messages), last.head, len(last.text), len(last.messages)
            at = _ws(text, at)
            at, end = _elements(text, at, messages, len(last.text))
            body = {**head, "messages": messages}
        else:
            at, start, end = _ws(text, 0), 0, -1
            if text[at] != "{":
                return None
            body, head = {}, {}
            at, end, found = _members(text, at + 1, body, head, first=True)
            if not found:
                return None
        if last is not None:
            at, _, found = _members(text, at, body, {}, first=False)
            if found:  # "messages" twice: json keeps the last, this reader the first
                return None
        if _ws(text, at) != len(text) or end < 0:
            return None
        return _Parsed(body, head, end, start)
    except (ValueError, IndexError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def _ws(text: str, at: int) -> int:
    match = _WS.match(text, at)
    return match.end() if match else at


def _elements(text: str, at: int, into: list[Any], end: int) -> tuple[int, int]:
    """The rest of a list, from ``at`` (after its last element, or after its ``[`` where ``end`` < 0)
    appended to ``into``: where the list ends (after its ``]``) and where its last element does."""
    while True:
        if text[at] == "]":
            return at + 1, end
        if end >= 0:  # after an element: a comma, then the next
            if text[at] != ",":
                raise ValueError("expected , or ]")
            at = _ws(text, at + 1)
        value, end = _DECODER.raw_decode(text, at)
        into.append(value)
        at = _ws(text, end)


def _members(text: str, at: int, body: dict[str, Any], head: dict[str, Any], *, first: bool) -> tuple[int, int, bool]:
    """An object's members from ``at`` (after its ``{`` where ``first``, else after a member) to its ``}``,
    into ``body``; the first ``messages``
    list's elements one by one, so where its last one ends is known, with the members before it in
    ``head``. Where the object ends, where its messages' last element does (-1: none) and whether a
    ``messages`` member was read."""
    end, found = -1, False
    at = _ws(text, at)
    while text[at] != "}":
        if not first:
            if text[at] != ",":
                raise ValueError("expected , or }")
            at = _ws(text, at + 1)
        first = False
        name, at = _DECODER.raw_decode(text, at)
        if not isinstance(name, str):
            raise ValueError("a member's name")
        at = _ws(text, at)
        if text[at] != ":":
            raise ValueError("expected :")
        at = _ws(text, at + 1)
        if name == "messages" and text[at] == "[" and not found:
            messages: list[Any] = []
            at, end = _elements(text, _ws(text, at + 1), messages, -1)
            body[name], found = messages, True
            if not messages:
                end = -1
        else:
            if name == "messages":
                raise ValueError("messages is not one list")
            body[name], at = _DECODER.raw_decode(text, at)
            if not found:
                head[name] = body[name]
        at = _ws(text, at)
    return at + 1, end, found
