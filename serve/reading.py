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

import bisect
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
    """One conversation's last body: its text up to the end of its last message, where each message ends
    in it, the members before its messages, the messages, the depth of their list, what reading them gave
    and where its text-form exchanges stood."""

    text: str
    ends: tuple[int, ...]
    head: dict[str, Any]
    messages: list[Any]
    depth: int
    read: Read
    exchanged: Exchanged


@dataclass(frozen=True)
class _Parsed:
    body: dict[str, Any]
    head: dict[str, Any]  # the members before "messages"
    ends: list[int]  # where each message ends in the text
    start: int  # the messages whose reading is taken from the last body (0: read them all)


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
            key, last, shared = self._find(protocol, header, text)
            parsed = _parse(text, last, shared)
        if parsed is None or text is None:
            body = load(data, max_depth=max_depth)  # its refusal, or a body this parse does not take
            check_depth(depth(body), max_depth)
            return self._read(protocol, body, None, None)
        held = last if parsed.start else None  # the last body's reading, where its messages are all kept
        messages = parsed.body["messages"]
        deepest = depth(messages[parsed.start:])
        if held is not None:
            deepest = max(deepest, held.depth)
        check_depth(max(depth({**parsed.body, "messages": []}), 1 + deepest), max_depth)
        kept = _Last(text[:parsed.ends[-1]], tuple(parsed.ends), parsed.head, messages, deepest, Read(), Exchanged())
        return self._read(protocol, parsed.body, held, key or (protocol, header, self._new_name()), kept)

    def _read(self, protocol: Protocol, body: dict[str, Any], last: _Last | None, key: tuple[Any, ...] | None,
              kept: _Last | None = None) -> ClientRequest:
        start = len(last.messages) if last is not None else 0
        CHECKS[protocol](body, start)
        request, read = READERS[protocol](body, last.read if last is not None else Read(), start)
        items, exchanged = exchanges_from(request.items, last.exchanged if last is not None else Exchanged())
        if key is not None and kept is not None:
            self._keep(key, replace(kept, read=read, exchanged=exchanged))
        return request if items == request.items else replace(request, items=items, text_exchanges=True)

    def _find(self, protocol: Protocol, header: str | None,
              text: str) -> tuple[tuple[Any, ...] | None, _Last | None, int]:
        """The kept body under ``protocol`` and ``header`` that ``text`` begins with, else the one it shares
        the most messages with (of the last ``_SHARED`` such), taken out, with its key and how many of its
        characters ``text`` begins with."""
        mine = [(k, last) for k, last in reversed(self._last.items()) if k[0] == protocol and k[1] == header]
        best: tuple[int, tuple[Any, ...] | None, _Last | None, int] = (0, None, None, 0)
        for i, (name, kept) in enumerate(mine):
            if text.startswith(kept.text):
                best = (len(kept.ends) + 1, name, kept, len(kept.text))
                break
            if i < _SHARED and text.startswith(kept.text[:_PEEK]):
                shared = _common(text, kept.text)
                messages = bisect.bisect_right(kept.ends, shared)
                if messages > best[0]:
                    best = (messages, name, kept, shared)
        _, key, last, shared = best
        if key is not None and last is not None:
            del self._last[key]
            self._chars -= len(last.text)
        return key, last, shared

    def _new_name(self) -> int:
        self._made += 1
        return self._made

    def _keep(self, key: tuple[Any, ...], last: _Last) -> None:
        if key[1] is not None:  # a session header names one conversation: its other bodies are done with
            for other in [k for k in self._last if k[:2] == key[:2]]:
                self._chars -= len(self._last.pop(other).text)
        self._last[key] = last
        self._chars += len(last.text)
        while self._last and (len(self._last) > self._keys or self._chars > self._kept_chars):
            self._chars -= len(self._last.popitem(last=False)[1].text)


_SHARED = 8  # kept bodies under one protocol and header that a body's shared prefix is sought with
_PEEK = 256  # characters a body must share with a kept one before that is sought


def _common(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` begin with alike (halving: a slice of the rest each time)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _parse(text: str, last: _Last | None, shared: int) -> _Parsed | None:
    """The body ``text`` is, as ``json.loads`` reads it, and where each of its messages ends. Where ``text``
    begins with ``shared`` characters of ``last``'s, the messages that lie within them are taken as they
    are and the parse goes on after them (from its end, when it begins with all of ``last``'s text: then
    ``start`` says so). None for a body whose ``messages`` is not a list of messages (once), or anything
    this parse stops at (``load`` then reads it, or refuses it)."""
    try:
        count = bisect.bisect_right(last.ends, shared) if last is not None else 0
        if last is not None and count:
            messages, ends = last.messages[:count], list(last.ends[:count])
            at = _elements(text, _ws(text, ends[-1]), messages, ends)
            body, head = {**last.head, "messages": messages}, last.head
            at, found = _members(text, at, body, {}, [], first=False)
            if found:  # "messages" twice: json keeps the last, this reader the first
                return None
        else:
            at, ends = _ws(text, 0), []
            if text[at] != "{":
                return None
            body, head = {}, {}
            at, found = _members(text, at + 1, body, head, ends, first=True)
            if not found:
                return None
        if _ws(text, at) != len(text) or not ends:
            return None
        whole = last is not None and shared == len(last.text)
        return _Parsed(body, head, ends, len(last.messages) if whole and last is not None else 0)
    except (ValueError, IndexError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def _ws(text: str, at: int) -> int:
    match = _WS.match(text, at)
    return match.end() if match else at


def _elements(text: str, at: int, into: list[Any], ends: list[int]) -> int:
    """The rest of a list, from ``at`` (after its last element, ``ends[-1]``, or after its ``[`` where
    ``ends`` is empty) appended to ``into``, where each ends appended to ``ends``; where the list ends
    (after its ``]``)."""
    while True:
        if text[at] == "]":
            return at + 1
        if ends:  # after an element: a comma, then the next
            if text[at] != ",":
                raise ValueError("expected , or ]")
            at = _ws(text, at + 1)
        value, end = _DECODER.raw_decode(text, at)
        into.append(value)
        ends.append(end)
        at = _ws(text, end)


def _members(text: str, at: int, body: dict[str, Any], head: dict[str, Any], ends: list[int], *,
             first: bool) -> tuple[int, bool]:
    """An object's members from ``at`` (after its ``{`` where ``first``, else after a member) to its ``}``,
    into ``body``; the first ``messages`` list's elements one by one, where each ends in ``ends``, with the
    members before it in ``head``. Where the object ends and whether a ``messages`` member was read."""
    found = False
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
            at = _elements(text, _ws(text, at + 1), messages, ends)
            body[name], found = messages, True
        else:
            if name == "messages":
                raise ValueError("messages is not one list")
            body[name], at = _DECODER.raw_decode(text, at)
            if not found:
                head[name] = body[name]
        at = _ws(text, at)
    return at + 1, found
