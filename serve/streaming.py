"""Streaming a client request (``"stream": true``): what of a step's text may be shown while it arrives,
and the link between the task that drives the conversation and the response that writes the events.

``StepText`` decides what of one step's text goes to the client now. The text is key-scrubbed first
(``providers/streaming.ShownText``: the upstream key, in every form the redactor covers, never goes out,
so with a key the last word waits for the next whitespace). Then it is held back from where the step may
be a call: a tool-call delta holds the rest of the step. For a model that writes its calls as text
(``text_calls``: the bundled Qwen writes ```json fences; the session's ``calls`` is ``"text"``), so does the
start of a call the driver's one parser (``context/request/toolcalls.py``) would read from the text: a fence
(```), a ``<tool_call>`` tag, a JSON object (``{``, ``[{``), and a word written right before an object
(``recall {...}``, the parser's ``named_json``); a tail that may still grow into one of those (a trailing
word, a backtick, ``<tool_c``) waits for the next delta. For any other model the text is never a call and
goes out as it arrives, whole. What was held is shown when the step ends as the turn's answer; a step that
called (the client's tools or the engine's) shows no more of it, so an engine call written inline is never
shown.

``Stream`` joins the driving task (the producer: it holds the session's lock, ingests, drives the turn
and posts events) and the response's generator (the consumer: it writes each event as SSE). The reply
is a handshake in two halves: the consumer writes all of it but the stream's last event and says so
(``delivered``); the producer then notes the request in the ledger (the ``serve.history`` activity; the
steps' receipts and the turn's card are in already) and posts ``done``, and only then does the last
event (``data: [DONE]``, ``message_stop``) go out. A client that reads the ledger as soon as its stream
ended (bench/serve_live.py counts each request's receipts against its history entry) finds it all. The
producer never gets cancelled by the client leaving: engine steps and ledger writes run to their end;
only the wait on the upstream's stream is cut (``guard``), and the conversation then closes the open turn
``cancelled`` and records nothing of the request, so the client's retry is ingested as new.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from vak_context.errors import VakError
from vak_context.providers.redaction import Redactor
from vak_context.providers.streaming import ShownText
from vak_context.serve.protocol import Reply

T = TypeVar("T")

# Where a call the one parser reads from text can begin (a fence opens anywhere here: holding a little
# more than the parser would read as a call only delays text, never shows a call).
_OPENER = re.compile(r"```|<tool_call>|\{|\[\s*\{")
# A tool name right before an arguments object (``name {`` or ``name({``), as the parser's _NAMED reads it.
_NAMED = re.compile(r"(?<![\w.-])[A-Za-z_][\w.-]{0,63}[ \t]*\(?[ \t]*\Z")
# A tag right before an object, as the bundled Qwen wraps a call (``<tools>\n{...}\n</tools>``): part of the
# call, never shown before it.
_TAG = re.compile(r"<[A-Za-z_][\w-]{0,30}>\s*\Z")
# A tail that may still become an opener or a named call once the next delta arrives (a tag, closed or not).
_PARTIAL = re.compile(r"(?:`{1,2}|<[A-Za-z_][\w-]{0,30}>?\s*|<|\[\s*|(?<![\w.-])[A-Za-z_][\w.-]{0,63}[ \t]*\(?[ \t]*)\Z")
PARAGRAPH = "\n\n"  # between the texts of two steps shown in one reply


class StepText:
    """The text of one upstream step as the client may see it (see the module docstring). ``lead`` goes
    before the step's first shown character (a paragraph break after an earlier step's shown text);
    ``text_calls``: the model writes its calls as text, so where one may start is held back."""

    def __init__(self, redactor: Redactor, lead: str = "", *, text_calls: bool = True) -> None:
        self._scrubbed = ShownText(redactor)
        self._lead = lead
        self.text_calls = text_calls
        self.safe = ""  # the key-scrubbed text so far (what ShownText lets out)
        self.shown = 0  # characters of ``safe`` shown
        self.held = False  # the step showed it may be a call: nothing more until it ends

    def add(self, delta: str, calling: bool) -> str:
        """What to show now, after ``delta`` (``calling``: the step has a tool-call delta by now)."""
        self.safe += self._scrubbed.add(delta)
        self.held = self.held or calling
        if self.held:
            return ""
        if not self.text_calls:  # its text is never a call: all of it goes out
            return self._show(len(self.safe))
        opener = _OPENER.search(self.safe, self.shown)
        if opener is not None:
            self.held = True
            before = self.safe[:opener.start()]
            named = (_NAMED.search(before) or _TAG.search(before)) if self.safe[opener.start()] in "{[" else None
            end = named.start() if named else len(before)
        else:
            partial = _PARTIAL.search(self.safe, self.shown)
            end = partial.start() if partial else len(self.safe)
        return self._show(end)

    def _show(self, end: int) -> str:
        if end <= self.shown:
            return ""
        out, self.shown = self.safe[self.shown:end], end
        out, self._lead = self._lead + out, ""
        return out

    def answer(self, answer: str) -> str:
        """The rest to show once the step ended as the turn's ``answer``: what of it was not shown yet (an
        answer a rule wrote instead of the step's text follows what was shown, after a paragraph break)."""
        self.safe += self._scrubbed.finish()
        shown = self.safe[:self.shown]
        if answer.startswith(shown):
            rest = answer[len(shown):]
        else:
            rest = (PARAGRAPH if shown else "") + answer
        if not rest:
            return ""
        out, self._lead = self._lead + rest, ""
        return out


class ClientGone(VakError):
    """The client closed the stream: the request's turn is closed and nothing of it recorded."""


@dataclass(frozen=True)
class Event:
    kind: str  # "text" (a delta), "reply" (calls and usage), "done" (the reply is noted: the last event), "error"
    text: str = ""
    reply: Reply | None = None
    error: BaseException | None = None


class Stream:
    """One streamed request: the producer posts events, the consumer takes them and acknowledges the reply."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self._gone = asyncio.Event()
        self._delivered = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- the producer's side

    @property
    def gone(self) -> bool:
        return self._gone.is_set()

    def text(self, delta: str) -> None:
        if delta:
            self.events.put_nowait(Event("text", delta))

    def fail(self, exc: BaseException) -> None:
        self.events.put_nowait(Event("error", error=exc))

    async def guard(self, awaitable: Awaitable[T]) -> T:
        """``awaitable`` (the upstream's stream), cut short with ClientGone when the client leaves first."""
        work = asyncio.ensure_future(awaitable)
        left = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({work, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise ClientGone("the client closed the stream")
        return work.result()

    def done(self) -> None:
        """The delivered reply is noted in the ledger: the response may write its last event."""
        self.events.put_nowait(Event("done"))

    async def deliver(self, reply: Reply) -> bool:
        """Post the reply and wait until the response has written it, all but its last event (which waits
        for :meth:`done`); False: the client left first."""
        if self.gone:
            return False
        self.events.put_nowait(Event("reply", reply=reply))
        waits = [asyncio.ensure_future(self._delivered.wait()), asyncio.ensure_future(self._gone.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self._delivered.is_set()

    # ---------------------------------------------------------------- the consumer's side

    def joined(self, text: str) -> tuple[str, Event | None]:
        """``text`` and the text events already queued behind it, as one delta (the driver ran ahead of the
        connection: one event to write, not many), and the first other event taken from the queue."""
        while not self.events.empty():
            event = self.events.get_nowait()
            if event.kind != "text":
                return text, event
            text += event.text
        return text, None

    def delivered(self) -> None:
        self._delivered.set()

    def leave(self) -> None:
        """The response ended (the client left, or the stream was written): the producer stops waiting."""
        self._gone.set()

