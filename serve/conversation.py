"""One client conversation as the server serves it: which ledger session holds it, what of the client's
history that session already holds, the turn left open while the client runs its tools, and the ingest
of what is new in each request (then the caller's loop, ``Session.begin``, until an answer or the
client's calls).

What a session holds of the client's history is in its ledger: after each answered request, a
``serve.history`` activity lists the digests and roles of the items that request added (the new messages
and the reply), the request's fingerprint, the reply as it went out and the assistant steps it came from,
so a restarted server reads every session back and answers a resend from it. Before its turn begins, a
request is noted as ``serve.asked`` (its fingerprint and new items): a server killed once the request's
answer is in the ledger and before its ``serve.history`` note leaves the resend an answer to give from the
ledger (``recovered``), so a retry after a kill at any moment after the answer stores nothing twice. What
the client withdrew (``serve/continuity.py``: messages it left out of a history that continues the session) is a
``history.withdrawn`` activity naming the items and the steps of the withdrawn replies, which the
projection leaves out from then on (``context/history/turns.py``). A history that changes a message the
session holds continues as a new session (``<name>.f<N>``) copied from the parent up to the last closed
turn the two share, with a ``session.forked`` activity naming the parent session and entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from vak_context.context.history.turns import WITHDRAWN
from vak_context.engine.api import Call, Session, Turn
from vak_context.errors import ContextOverflow, InvalidInput, ProviderError, RequestTooLarge
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity
from vak_context.serve.continuity import Asked, Held, Marker
from vak_context.serve.protocol import ClientCall, ClientRequest, Item, Reply, Usage
from vak_context.serve.resume import Earlier, pending_exchanges, stored_before
from vak_context.serve.streaming import PARAGRAPH, ClientGone, StepText, Stream
from vak_context.serve.textform import client_form
from vak_context.serve.upstream import UpstreamClient
from vak_context.storage.ledger_copy import copy_entries

# What binding a session imports (``Session._bind``, with the event loop held): imported with the server,
# before it answers /health, so the first request after a start does not wait for them (1.4 s on 2 cores)
# while every other session's request waits behind it.
# So is what the first upstream call imports: httpcore's anyio backend (about 25 ms, on the event loop).
BINDING_MODULES = ("vak_context.engine.binding", "vak_context.actors.local_services", "vak_context.actors.planner",
                   "vak_context.actors.assembler", "vak_context.actors.evidence", "vak_context.agent.loop",
                   "vak_context.context.request.assemble", "vak_context.providers.registry", "anyio._backends._asyncio")
for _module in BINDING_MODULES:
    importlib.import_module(_module)

HISTORY = "serve.history"
ASKED = "serve.asked"
FORKED = "session.forked"
ANSWERED = ("completed", "degraded")  # the outcomes of a turn whose answer went to the client
__all__ = ["ASKED", "FORKED", "HISTORY", "WITHDRAWN", "Conversation", "Held", "Routed", "fork", "read_held",
           "recovered", "replayed"]


def read_held(ledger: Any, name: str) -> Held:
    """The client history a ledger session holds, from its ``serve.history`` and ``history.withdrawn``
    activities."""
    held = Held()
    if name not in ledger.sessions():
        return held
    mapper = Mapper()
    # Only the session's activity entries are read (a quarter of a served session's): the kinds are in the
    # ledger's rows, so a resumed session's first request does not decode its steps, results and plans.
    for entry in ledger.entries_of(name, ("activity",)):
        payload = mapper.payload_of(entry)
        detail = payload.detail
        if payload.activity == HISTORY:
            digests = list(detail["digests"])
            # Before roles were noted: the reply is the last item, the rest counted as the client's own.
            roles = list(detail.get("roles") or ["user"] * (len(digests) - 1) + ["assistant"])
            held.noted(digests, roles, Marker(
                len(held.digests) + len(digests), entry.id, bool(detail["closed"]), str(detail.get("history", "")),
                detail.get("reply"), detail.get("key"), tuple(detail.get("steps") or ())))
        elif payload.activity == ASKED:
            held.asked = Asked(entry.id, str(detail["history"]), tuple(detail["digests"]), tuple(detail["roles"]),
                               detail.get("key"))
        elif payload.activity == WITHDRAWN and "at" in detail:
            held.withdraw([int(p) for p in detail["at"]])
    return held


def fork(ledger: Any, parent: str, child: str, held: Held, common: int) -> Held:
    """Copy ``parent`` into ``child`` up to the last closed turn within the ``common`` items, then record
    the fork; what ``child`` holds (the client items after it are ingested as new)."""
    at = next((m for m in reversed(held.markers) if m.closed and m.upto <= common), None)
    mapper = Mapper()
    if at is not None:
        copy_entries(ledger.chain_to_root(at.entry), mapper.payload_of, child,
                     lambda s, p, b: ledger.append(s, [p], blobs=[b])[0])
    ledger.append(child, [Activity(activity=FORKED, detail={
        "parent": parent, "entry": at.entry if at else None, "items": at.upto if at else 0,
        "common": common, "why": "the client's history changes a message the parent holds"})])
    return read_held(ledger, child)


def replayed(marker: Marker, model: str) -> Reply:
    """The reply an exchange sent, for a resend of it (no upstream call, nothing appended)."""
    reply = marker.reply or {}
    usage = [int(n) for n in reply.get("usage") or (0, 0, 0)]
    return Reply(model, str(reply.get("text", "")),
                 tuple(ClientCall(str(i), str(n), dict(a)) for i, n, a in reply.get("calls") or ()), Usage(*usage))


def recovered(ledger: Any, name: str, held: Held, model: str) -> Reply | None:
    """The answer to the request ``held.asked`` names, from the ledger, noted now: a server killed after the
    request's turn was answered (its answering step, with or without its card, or a step whose calls wait
    for the client) and before its ``serve.history`` note left the answer unnoted, and the client's resend
    of the request gets it from here (no upstream call, nothing stored again). None where the ledger holds no answer to it (killed mid-turn,
    or the turn failed or was cancelled: the resend is served anew)."""
    asked = held.asked
    if asked is None:
        return None
    mapper = Mapper()
    steps: list[tuple[str, Any]] = []  # the request's own steps (not the earlier steps it recorded again)
    earlier: set[str] = set()
    results: set[str] = set()
    outcome: str | None = None
    for entry in ledger.entries(name, ledger.get(asked.entry).seq + 1):
        if entry.kind == "assistant_step":
            steps.append((entry.id, mapper.payload_of(entry)))
        elif entry.kind == "tool_result":
            results.add(mapper.payload_of(entry).tool_use_id)
        elif entry.kind == "turn_card":
            outcome = mapper.payload_of(entry).outcome
        elif entry.kind == "activity":
            payload = mapper.payload_of(entry)
            if payload.activity == "turn.earlier_step":
                earlier.add(str(payload.detail.get("step_id")))
    steps = [(i, s) for i, s in steps if i not in earlier]
    if not steps:
        return None
    last = steps[-1][1]
    if outcome is None and last.tool_uses:  # the turn is open: its last step's calls wait for the client's results
        calls = tuple(ClientCall(b.id, b.name, dict(b.input)) for b in last.tool_uses if b.id not in results)
        if not calls:
            return None
        reply, closed = Reply(model, "", calls, Usage()), False
    elif outcome is None:  # the answering step is in, its card is not (killed between the two): the answer
        if not last.text.strip():
            return None
        reply, closed = Reply(model, last.text, (), Usage()), True
    elif outcome in ANSWERED:
        reply, closed = Reply(model, last.text, (), Usage()), True
    else:
        return None
    items = [*asked.digests, reply.item().digest()]
    roles = [*asked.roles, "assistant"]
    noted = _noted_reply(reply)
    step_ids = [i for i, _ in steps]
    entry = ledger.append(name, [Activity(activity=HISTORY, detail={
        "digests": items, "roles": roles, "closed": closed, "history": asked.history, "reply": noted,
        "steps": step_ids, "recovered": True, **({"key": asked.key} if asked.key else {})})])[0]
    held.noted(items, roles, Marker(len(held.digests) + len(items), entry, closed, asked.history, noted, asked.key,
                                    tuple(step_ids)))
    return reply


def _written_after(ledger: Any, name: str, entry_id: str) -> list[Any]:
    """The session's entries after ``entry_id`` (a request's ``serve.asked`` note: what its turn wrote)."""
    return ledger.entries(name, ledger.get(entry_id).seq + 1)


def _noted_reply(reply: Reply) -> dict[str, Any]:
    u = reply.usage
    return {"text": reply.text, "calls": [[c.id, c.name, dict(c.arguments)] for c in reply.calls],
            "usage": [u.prompt, u.completion, u.cached]}


def _call_text(item: Item) -> str:
    calls = "; ".join(f"{c.name}({json.dumps(dict(c.arguments))})" for c in item.calls)
    return f"{item.text} [calls: {calls}]" if calls else item.text


@dataclass(frozen=True)
class Routed:
    """One request as routed to its session: the client's items new to it, the positions of what it holds
    that the client withdrew, the request's fingerprint and the client's ``Idempotency-Key``."""

    new: tuple[Item, ...]
    withdrawn: tuple[int, ...] = ()
    history: str = ""
    key: str | None = None
    again: bool = False  # the client asks again for the last reply (``Held.reask``): its request is resent


@contextlib.asynccontextmanager
async def committed(ledger: Any, session: str, *, opened: bool = False) -> AsyncIterator[None]:
    """One durable commit for what a request writes to ``session``: its appends (the server's notes and its
    turn's steps) are written behind (``LedgerStore.hold``: on disk and readable at once, not yet synced)
    and synced once on the way out, before the reply goes to the client; an error answered instead of a
    reply is synced as well. Each append was its own fsync before: 6-7 commits a request (bench/serve.py).
    A turn's card still syncs where it closes (``close_turn``). On Ray the LedgerActor commits each append
    as before (the client holds no store). ``opened``: the store has the session open (an earlier request of
    this conversation held it), so holding it is a counter under a lock, done here rather than on a thread;
    and nothing written behind at the end (a note that synced itself, ``_note_reply``) needs no thread either:
    each hop to a thread and back waits for the GIL behind whatever else runs (bench/serve.py)."""
    store = getattr(ledger, "store", None)
    if store is None:
        yield
        return
    if opened:
        store.hold(session)
    else:  # opening a session reads its segments (and may seal a torn tail): not on the event loop
        await asyncio.to_thread(store.hold, session)
    try:
        yield
    finally:
        try:
            if store.written_behind(session):
                await asyncio.to_thread(store.sync, session)
        finally:
            store.release(session, sync=False)


def _noted_after(ledger: Any, name: str, mark: str, resumed: Sequence[str],
                 note: Callable[[list[str]], dict[str, Any]]) -> tuple[str, list[str]]:
    """On a thread: the assistant steps written after ``mark`` (not ``resumed``), the ``serve.history`` note
    ``note(steps)`` appended, and what the request wrote made durable (``committed`` then has nothing to
    sync): one hop for what were three."""
    steps = [e.id for e in _written_after(ledger, name, mark) if e.kind == "assistant_step" and e.id not in resumed]
    entry = ledger.append(name, [Activity(activity=HISTORY, detail=note(steps))])[0]
    store = getattr(ledger, "store", None)
    if store is not None:
        store.sync(name)
    return entry, steps


class Conversation:
    """One ledger session serving a client conversation. The app holds the conversation's lock around
    each call, so at most one request drives it at a time."""

    def __init__(self, name: str, session: Session, held: Held, signature: tuple[str, ...]) -> None:
        self.name, self.session, self.held, self.signature = name, session, held, signature
        self.turn: Turn | None = None  # open while the client runs the calls it was given
        self.closed: Turn | None = None  # the turn the last reply closed, its packet summary not yet written
        self.opened = False  # the store has the session open: an earlier request held it (``committed``)

    async def answer(self, request: ClientRequest, routed: Routed, upstream: UpstreamClient, ledger: Any,
                     stream: Stream | None = None) -> Reply:
        """``_answer``, its appends written behind and made durable together before it returns (``committed``)."""
        async with committed(ledger, self.name, opened=self.opened):
            self.opened = True
            return await self._answer(request, routed, upstream, ledger, stream)

    async def _answer(self, request: ClientRequest, routed: Routed, upstream: UpstreamClient, ledger: Any,
                      stream: Stream | None = None) -> Reply:
        """Withdraw what the client left out, ingest what is new (the items after what the session holds),
        run the turn to an answer or to calls of the client's tools, note what the session now holds. With
        ``stream`` the text goes out as it arrives and the reply is noted only once the response has written
        it, all but the last event (which the app writes after this returns, so a client that read it finds
        the request noted): a client that left before closes the open turn (``cancelled``) and leaves nothing
        noted, so its retry is ingested anew."""
        new = routed.new
        if not new:
            raise InvalidInput("the history holds nothing new since the last reply: append the user's next "
                               "message, or the results of the calls the last reply made")
        if routed.withdrawn:
            await self._withdraw(routed.withdrawn, ledger, again=routed.again)
        # Noted before the turn begins: a server killed once the answer is in the ledger and before this
        # request's note leaves the resend something to answer it from (``recovered``), not a turn to redo.
        asked = {"history": routed.history, "digests": [i.digest() for i in new], "roles": [i.role for i in new],
                 **({"key": routed.key} if routed.key else {})}
        mark = await self._note(ledger, ASKED, asked)
        self.held.asked = Asked(mark, routed.history, tuple(asked["digests"]), tuple(asked["roles"]), routed.key)
        if self.turn is None and (reopened := await self._reopen(new)) is not None:
            self.turn = reopened
            # Its results stored before the kill: nothing to hand back (the turn's next request follows).
            directive, earlier = ("", []) if not reopened.pending else await self._ingest(request, new)
        else:
            directive, earlier = await self._ingest(request, new)
        turn, resumed = self.turn, list[str]()
        if directive:
            turn, resumed = await self._begin(directive, earlier, ledger)
        if turn is None:
            raise InvalidInput("the history holds nothing new since the last reply: append the user's next "
                               "message, or the results of the calls the last reply made")
        usage, reply = Usage(), None
        try:
            reply = await self._drive(turn, request, upstream, usage, stream)
            if stream is not None and not await stream.deliver(reply):
                raise ClientGone("the client closed the stream before the reply was written")
        except ClientGone:
            await turn.close()  # a turn waiting for calls the client never got, or one cut mid-step
            raise
        finally:
            if turn.done:
                self.turn = None
                self.closed = turn
        await self._note_reply(ledger, routed, new, reply, mark, resumed)
        return reply

    async def _begin(self, directive: str, earlier: Sequence[Earlier], ledger: Any) -> tuple[Turn, list[str]]:
        """The turn a new directive opens (one left open for calls the client moved on from is closed), with
        the earlier steps a resend carries recorded in it: the turn and the steps resumed."""
        if self.turn is not None:  # the client moved on without the results of the calls it was given
            await self.turn.close()
            self.turn = None
        self.closed = None  # the session moved on: this request plans (and summarises) for itself
        stored: dict[str, str] = {}
        if earlier:  # what an earlier try left of these exchanges: the steps go, the evidence is reused
            old, stored = await asyncio.to_thread(stored_before, ledger, self.name, earlier)
            if old:
                await self._note(ledger, WITHDRAWN, {
                    "steps": old, "why": "the client resends these calls with their results: recorded "
                    "again in the turn that continues them"})
        turn = self.turn = await self.session.begin(directive)
        turn.summarise_at_close = False  # not on this reply's path: summarise_ahead(), once it is out
        try:
            return turn, await self._resume(turn, earlier, stored)
        except BaseException:  # the turn closed ``failed`` (its card says why): the next request begins anew
            self.turn = None
            raise

    async def _note_reply(self, ledger: Any, routed: Routed, new: Sequence[Item], reply: Reply, mark: str,
                          resumed: Sequence[str]) -> None:
        """What the session now holds, noted (``serve.history``): the request's items and its reply, and the
        steps this request wrote (withdrawing its reply later takes them out of the projection)."""
        items = [*new, reply.item()]
        digests, roles = [i.digest() for i in items], [i.role for i in items]
        closed = self.turn is None
        noted = _noted_reply(reply)

        def note(steps: list[str]) -> dict[str, Any]:
            return {"digests": digests, "roles": roles, "closed": closed, "history": routed.history, "reply": noted,
                    "steps": steps, **({"key": routed.key} if routed.key else {})}

        if self.turn is not None and not self.turn.done:  # through the turn left open for the client's calls
            steps = [e.id for e in await asyncio.to_thread(_written_after, ledger, self.name, mark)
                     if e.kind == "assistant_step" and e.id not in resumed]
            entry = await self.turn.note(HISTORY, note(steps))
        else:
            entry, steps = await asyncio.to_thread(_noted_after, ledger, self.name, mark, resumed, note)
        self.held.noted(digests, roles, Marker(len(self.held.digests) + len(items), entry, closed, routed.history,
                                               noted, routed.key, tuple(steps)))

    async def _note(self, ledger: Any, activity: str, detail: dict[str, Any]) -> str:
        """Append one activity to the session: through the turn left open for the client's calls while there
        is one (``Turn.note``: a session's ledger takes no other append mid-turn), else to the ledger."""
        if self.turn is not None and not self.turn.done:
            return await self.turn.note(activity, detail)
        return (await asyncio.to_thread(ledger.append, self.name, [Activity(activity=activity, detail=detail)]))[0]

    async def summarise_ahead(self, ledger: Any = None) -> None:
        """Once the reply that closed a turn is out (the app holds the session's lock meanwhile, so the
        client's next request waits for it): write the packet summary the session's next request will
        need (``Turn.summarise_ahead``), so that request's path never waits on the upstream for it."""
        turn, self.closed = self.closed, None
        if turn is not None:
            async with committed(ledger, self.name, opened=self.opened):
                await turn.summarise_ahead()

    async def _reopen(self, new: Sequence[Item]) -> Turn | None:
        """The turn a killed server left open in the ledger, taken up (``Session.reopen``) when what is new
        is the results of exactly the calls its last step made (the reply the session holds went out with
        them, and the turn was never closed): the resend continues that turn, recording no step again and no
        directive; else None (the results start a new turn, ``serve/resume.py``)."""
        last = self.held.markers[-1] if self.held.markers else None
        if last is None or last.closed or last.withdrawn or not new or any(i.role != "tool" for i in new):
            return None
        turn = await self.session.reopen({i.call_id for i in new}, {i.call_id: i.text for i in new})
        if turn is not None:
            turn.summarise_at_close = False  # as for any turn this server drives: summarise_ahead()
        return turn

    async def _withdraw(self, positions: Sequence[int], ledger: Any, *, again: bool = False) -> None:
        """Append what the client withdrew: the items (positions in what the session holds, and digests) and
        the steps of withdrawn replies. A turn left open for calls of a withdrawn reply is closed first
        (``cancelled``): the client will send no results for them."""
        last = self.held.markers[-1] if self.held.markers else None
        if self.turn is not None and last is not None and not last.closed and (last.upto - 1) in positions:
            await self.turn.close()
            self.turn = None
        steps = self.held.steps_at(positions)
        await self._note(ledger, WITHDRAWN, {
            "at": list(positions), "digests": [self.held.digests[p] for p in positions], "steps": steps,
            "why": "the client asks again for the last reply: it is left out, its request sent again" if again
            else "the client's history leaves these out"})
        self.held.withdraw(positions)

    async def _ingest(self, request: ClientRequest, new: Sequence[Item]) -> tuple[str, list[Earlier]]:
        """Hand the open turn the results it waits for; the rest of what is new is the next directive (the
        user's words; replies and results before them that the session holds no turn for are quoted into it,
        in order) and the exchanges pending at its end, results of calls the session holds no open turn for
        (``serve/resume.py``: recorded in the new turn as its earlier steps, the results stored as evidence)."""
        turn, parts = self.turn, []
        pending = set(turn.pending) if turn is not None else set()
        quoted, earlier = ((list(new), []) if any(i.role == "tool" and i.call_id in pending for i in new)
                           else pending_exchanges(request, new))
        calls: dict[str, ClientCall] | None = None  # the history's calls by id, read once a result needs them
        for item in quoted:
            if item.role == "tool" and turn is not None and item.call_id in turn.pending:
                await turn.tool_result(item.call_id, item.text, is_error=item.is_error)
            elif item.role == "tool":
                if calls is None:
                    calls = {c.id: c for i in request.items if i.role == "assistant" for c in i.calls}
                call = calls.get(item.call_id)
                what = f"{call.name}({json.dumps(dict(call.arguments))})" if call else f"call {item.call_id}"
                parts.append(f"[the result of {what}{' (an error)' if item.is_error else ''}]: {item.text}")
            elif item.role == "assistant":
                parts.append(f"[an earlier reply of yours]: {_call_text(item)}")
            elif item.text.strip():
                parts.append(item.text)
        if (parts or earlier) and not any(i.role == "user" for i in quoted):
            # Results of a turn this server no longer holds (it restarted, or the upstream failed after
            # them): the request they answer comes first.
            asked = next((i.text for i in reversed(request.items[:len(request.items) - len(new)]) if i.role == "user"), "")
            parts.insert(0, f"(continuing your earlier request: {asked})")
        return "\n\n".join(parts), earlier

    async def _resume(self, turn: Turn, earlier: Sequence[Earlier], stored: dict[str, str]) -> list[str]:
        """The exchanges pending at the end of the client's history, as the new turn's earlier steps (each
        result stored as evidence, or referred to where an earlier try stored it); their step ids."""
        steps = []
        for exchange in earlier:
            calls = [Call(c.id, c.name, dict(c.arguments)) for c in exchange.calls]
            steps.append(await turn.earlier_step(calls, exchange.results, stored=stored))
        return steps

    async def _drive(self, turn: Turn, request: ClientRequest, upstream: UpstreamClient, usage: Usage,
                     stream: Stream | None) -> Reply:
        last_status, shown = 200, list[str]()  # shown: the text the client was sent, every step's
        while (sent := await turn.request()) is not None:
            sent = replace(sent, body=client_form(sent.body, sent.wire, request))
            if stream is None:
                got = await upstream.send(sent)
            else:
                step = StepText(upstream.redactor, PARAGRAPH if shown else "", text_calls=self.session.calls == "text")

                def show(delta: str, calling: bool, step: StepText = step) -> None:
                    out = step.add(delta, calling)
                    if out:
                        shown.append(out)
                        stream.text(out)

                try:
                    got = await stream.guard(upstream.stream(sent, show))
                except (ProviderError, httpx.HTTPError) as exc:
                    await _broken(turn, exc)
                    if isinstance(exc, ProviderError):
                        raise
                    raise ProviderError(f"the upstream's stream broke: {exc}; the client may retry the request",
                                        provider="upstream", status=502) from exc
            usage.add(got.usage)
            last_status = got.status
            action = await turn.reply(got.body, got.status)
            if action.calls:
                return Reply(request.model, "".join(shown), tuple(_client_calls(action)), usage)
            if action.done:
                if stream is not None and (rest := step.answer(action.answer)):
                    shown.append(rest)
                    stream.text(rest)
                break
        if (too_large := turn.too_large) is not None:  # not even the turn at its most compact fits: nothing sent
            raise _refused(too_large)
        result = turn.result
        if result.outcome == "failed":
            why = f"the turn failed: {result.card.text[:300]}"
            if last_status == 400:  # the over-length request was re-planned once and rejected again
                raise ContextOverflow(f"{why}; the upstream rejected the request as over-length after one re-plan",
                                      provider="upstream")
            raise ProviderError(f"{why}; the client may retry the request", provider="upstream",
                                status=last_status if last_status >= 400 else 502)
        # Streamed, the reply is the text the client was sent (it sends that back): the answer, after any
        # text an earlier step showed before it called the engine's tools.
        return Reply(request.model, result.answer if stream is None else "".join(shown), (), usage)


def _refused(exc: RequestTooLarge) -> RequestTooLarge:
    """The request the client sent cannot reach the upstream (its turn is closed ``failed``): a 4xx that
    says why and what to do, never a 5xx inviting the same request again."""
    return RequestTooLarge(f"{exc} For this server: the newest messages of the history cannot fit the upstream's "
                           "window even at their most compact, and resending the same request fails the same way; send a "
                           "shorter message (a smaller tool result), start a new conversation, or serve the "
                           "upstream with a larger --window.", needed=exc.needed, available=exc.available)


async def _broken(turn: Turn, exc: Exception) -> None:
    """The upstream's stream broke after it began (an error chunk, a cut connection): the turn is closed
    ``failed`` as for an error status (the error the caller raises is the gateway's)."""
    with contextlib.suppress(ProviderError):
        await turn.reply({"error": {"message": f"the upstream's stream broke: {exc}", "type": "server_error"}}, 502)


def _client_calls(action: Any) -> list[ClientCall]:
    return [ClientCall(c.id, c.name, dict(c.arguments)) for c in action.calls]
