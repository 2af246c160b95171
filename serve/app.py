"""The Starlette app of ``vak serve``: ``/v1/chat/completions`` (OpenAI), ``/v1/messages`` (Anthropic) and
``/v1/models``, in front of one upstream model, every request through the engine.

Each request is routed to its conversation (the ``x-vak-session`` header names it; else a keyed digest (the
ledger's scope, serve/scope.py) of the system prompt, the tool names and the first user message), whose lock serialises its
requests (with several workers, the session's lease too: ``serve/leases.py``, ``serve/workers.py``); different
conversations run concurrently. Errors come back in the client's protocol's shape.
The turn rules run as ``ServeConfig.rules`` says (``--rules``; default ``observe``: the client is the agent
here, so a rule only records what it would have done), or as a request's ``x-vak-rules`` header says for
that request (docs/DRIFT.md). Each ``x-vak-pin`` header of a request (``rule: Never push to main``; the
category is optional) pins a statement into the session's stated state before the request's turn, as
``Session.pin`` does (docs/STATE.md): the same pin sent with every request writes it once.
A streamed request (``"stream": true``) is driven by a task of its own holding that lock to the stream's
end; the response writes its events as they come (``serve/streaming.py``), and its status is chosen once
the first event is in: an error before then is a plain error response.
A reply that closed a turn goes out first; then, still holding the session's lock, the packet summary the
session's next request will need is written (an upstream call, where one is due), so that request finds
it stored and never waits on the summariser on its own path.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vak_context.agent.tools.registry import tool
from vak_context.engine.api import Engine, Session, pin_stated
from vak_context.errors import (
    InvalidInput,
    InvalidName,
)
from vak_context.names import check_name
from vak_context.serve.bodies import BODY_IDLE_S, MAX_BODY_BYTES, check_content_type, read_body
from vak_context.serve.continuity import decide, fingerprint
from vak_context.serve.conversation import Conversation, Held, Routed, fork, read_held, recovered, replayed
from vak_context.serve.headers import (
    FRESH,
    PIN_HEADER,
    RULES_HEADER,
    SESSION_HEADER,
    Resend,
    client_key,
    request_pins,
    request_rules,
)
from vak_context.serve.leases import Elsewhere, SessionLocks
from vak_context.serve.protocol import (
    AnthropicEvents,
    ClientRequest,
    DigestMemo,
    Events,
    OpenAIEvents,
    Protocol,
    Reply,
    anthropic_reply,
    error_body,
    openai_reply,
)
from vak_context.serve.reading import Reader
from vak_context.serve.responses import error_response, streamed
from vak_context.serve.scope import ledger_scope
from vak_context.serve.streaming import ClientGone, Stream
from vak_context.serve.upstream import UpstreamClient

log = logging.getLogger("vak.serve")


@dataclass(frozen=True)
class ServeConfig:
    """What the server serves: the upstream spec (and base URL, key held in memory only), the budget to
    plan against until a profile is measured, and the per-run key clients must send (None: any)."""

    upstream: str
    base_url: str | None = None
    upstream_key: str | None = None
    client_key: str | None = None
    window: int | None = None
    horizon: int | None = None
    max_tokens: int = 1024
    # The client's tools: "auto" defers them (catalogue + find_tools, each still callable by name) when their
    # schemas exceed DEFER_SHARE of the bound model's horizon; "always" / "never" decide for every client.
    defer_tools: str = "auto"
    # The turn rules' setting (Engine.session's rules=): observe by default, since the client is the agent.
    rules: str = "observe"
    # How the upstream makes its calls (Session(calls=...)): "text" (parsed from its replies' text), "native"
    # (its tool calls only; its text reaches the client whole); None: measured, else the bundled model's own.
    calls: str | None = None
    # Packet summaries are calls to the upstream (the client's bill): "off" carries the engine's extract instead.
    summaries: str = "on"
    # The model pass at turn close (Session(stated_pass=...)): a call to the upstream per turn, so the operator's
    # to turn on ("model"); by default the engine's patterns alone read what the user stated (docs/STATE.md).
    stated_pass: str = "deterministic"
    # A request body's bounds (serve/bodies.py): its bytes, read as they stream in, and the longest pause in it.
    max_body: int = MAX_BODY_BYTES
    idle_s: float = BODY_IDLE_S

    @property
    def model(self) -> str:
        return self.upstream.partition(":")[2] or self.upstream


def _client_side(**arguments: Any) -> None:
    """A client's tool: the client runs it (the caller's loop hands its calls back, never runs them)."""
    raise InvalidInput("a client's tool runs in the client; the server only passes its calls back")


class Server:
    """The conversations of one ledger served against one upstream."""

    def __init__(self, engine: Engine, config: ServeConfig, client: httpx.AsyncClient | None = None,
                 locks: SessionLocks | None = None) -> None:
        self.engine, self.config = engine, config
        # What serialises a session's requests: a lock here, and the session's lease across workers
        # (serve/leases.py); the key is the session's (its forks share their parent's).
        self.locks = locks or SessionLocks()
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(trust_env=False, timeout=900.0)
        self.upstream = UpstreamClient(self.client, config.upstream_key)
        self.ledger = engine.ledger()
        self.scope = ledger_scope(engine.folder)  # names headerless conversations alike across restarts
        self.conversations: dict[str, Conversation] = {}
        self._keys: dict[str, str] = {}  # a conversation's session key (a fork's is its parent's)
        # A key's session and its forks, as this worker last saw them (it forks them under the key's lock;
        # another worker's forks come with the lease, which forgets these): no folder listing per request.
        self._lineages: dict[str, list[str]] = {}
        self._digests = DigestMemo()  # the digests of each key's last request (its history, sent again)
        self.reader = Reader()  # each conversation's last body: a request's history is read from where it ended
        self._streams: set[Stream] = set()  # streamed requests still driving
        self._summaries: set[asyncio.Task[None]] = set()  # packet summaries written after a reply went out

    def key_of(self, request: ClientRequest, header: str | None) -> str:
        if header:
            try:
                check_name(header, "session")
            except InvalidName as exc:
                raise InvalidInput(f"{SESSION_HEADER}: {exc}") from exc
            return header
        # Named from the conversation's start under the ledger's scope secret (serve/scope.py), not the
        # client's key: that is new at each start, and a restart would fork every headerless conversation.
        first = next((i.text for i in request.items if i.role == "user"), "")
        basis = json.dumps([request.system, sorted(t.name for t in request.tools), first])
        return "c-" + hmac.new(self.scope, basis.encode(), hashlib.sha256).hexdigest()[:20]

    async def handle(self, request: ClientRequest, key: str, rules: str | None = None,
                     resend: Resend = FRESH, pins: Sequence[tuple[str, str]] = ()) -> Reply:
        # A resend that comes while its original runs waits for it, then is answered from it.
        await self._acquire(key)
        conversation: Conversation | None = None
        try:
            with self.engine.foreground():  # reading and binding a resumed session: the catch-ups wait
                routed = await self._route(request, key, resend)
            if isinstance(routed, Reply):
                return routed
            conversation, exchange = routed
            conversation.session.rules = rules or self.config.rules
            await _pin(conversation.session, pins)
            return await conversation.answer(request, exchange, self.upstream, self.ledger)
        finally:
            self._release_after_summary(conversation, key)

    async def _acquire(self, key: str) -> None:
        """Wait for the session's turn; if another worker served it since this one last did, what this one
        holds of it (its conversations, their bound sessions) is stale: forgotten, read from the ledger anew."""
        if await self.locks.acquire(key):
            try:
                await self._forget(key)
            except BaseException:
                self.locks.release(key)
                raise

    def _release(self, key: str) -> None:
        """The session's next request may run, here or on another worker; one that waits on a turn left
        open here for the client's calls is sent here (serve/leases.py)."""
        self.locks.release(key, open_turn=any(c.turn is not None for n, c in self.conversations.items()
                                              if self._keys.get(n) == key))

    async def _forget(self, key: str, *, close_turns: bool = False) -> None:
        """Let the conversations of ``key``'s lineage go; ``close_turns``: the server stops, and a turn left
        open for the client's calls is closed (its card says it was cancelled)."""
        self._lineages.pop(key, None)
        self._digests.forget(key)
        for name in [n for n in self.conversations if self._keys.get(n) == key or n == key]:
            conversation = self.conversations.pop(name)
            if conversation.turn is not None and not close_turns:
                # The turn it left open is the other worker's to continue or close now: closing it here
                # would write its card after that worker's entries.
                conversation.session._release_turn(conversation.turn)
            await conversation.session.close()

    def _release_after_summary(self, conversation: Conversation | None, key: str) -> None:
        """The reply goes out now; a turn it closed has the packet summary the next request will need
        written by a task that holds the session's lock until it is in (the next request waits for it
        rather than summarising on its own path), then releases it."""
        if conversation is None or conversation.closed is None:
            self._release(key)
            return

        async def summarise() -> None:
            try:
                await conversation.summarise_ahead(self.ledger)
            except Exception:
                log.exception("session %s: the packet summary ahead of the next request failed", conversation.name)
            finally:
                self._release(key)

        task = asyncio.create_task(summarise(), name=f"vak-serve-summary-{conversation.name}")
        self._summaries.add(task)
        task.add_done_callback(self._summaries.discard)

    def stream(self, request: ClientRequest, key: str, rules: str | None = None, resend: Resend = FRESH,
               pins: Sequence[tuple[str, str]] = ()) -> Stream:
        """Drive ``request`` in a task of its own that holds the session's lock to the stream's end and
        posts its events to the returned stream (the response's generator writes them)."""
        stream = Stream()

        async def produce() -> None:
            conversation: Conversation | None = None
            try:
                await self._acquire(key)
                try:
                    if stream.gone:  # the client left while an earlier request of its session ran
                        raise ClientGone("the client closed the stream before its request was driven")
                    routed = await self._route(request, key, resend)
                    if isinstance(routed, Reply):  # a resend: the stored reply, streamed
                        if routed.text:
                            stream.text(routed.text)
                        if not await stream.deliver(routed):
                            raise ClientGone("the client closed the stream before the reply was written")
                    else:
                        conversation, exchange = routed
                        conversation.session.rules = rules or self.config.rules
                        await _pin(conversation.session, pins)
                        await conversation.answer(request, exchange, self.upstream, self.ledger, stream)
                    stream.done()  # the request is noted: the response writes its last event
                    if conversation is not None:  # then, still holding the lock, the next request's summary
                        await conversation.summarise_ahead(self.ledger)
                finally:
                    self._release(key)
            except ClientGone as exc:
                log.info("session %s: the client closed its stream; the turn is closed, nothing noted", key)
                stream.fail(exc)  # nobody reads it, unless the response had not started yet
            except Exception as exc:
                stream.fail(exc)
            except asyncio.CancelledError:  # the server stops: the response must not wait for an event forever
                stream.fail(ClientGone("the server stopped before the request was driven to its end"))
                raise

        stream.task = asyncio.create_task(produce(), name=f"vak-serve-stream-{key}")
        self._streams.add(stream)
        stream.task.add_done_callback(lambda _t: self._streams.discard(stream))
        return stream

    async def _route(self, request: ClientRequest, key: str, resend: Resend) -> tuple[Conversation, Routed] | Reply:
        """A resend of an exchange a session of ``key``'s lineage holds: its reply, from the ledger. Else the
        session the history continues (``serve/continuity.py``; the one that keeps the most of it), else a
        fork of the one it shares most with; with what is new and what the client withdrew."""
        digests = self._digests.digests(key, request.items)
        # A resend is the same request: the same system prompt and tools as well as the same history.
        history = fingerprint([request.system, *sorted(t.name for t in request.tools), *digests])
        cached = self._lineages.get(key)
        names = cached if cached is not None else await asyncio.to_thread(self._lineage, key)
        held = {n: self.conversations[n].held if n in self.conversations else await asyncio.to_thread(read_held, self.ledger, n)
                for n in names}
        for name in reversed(names):
            marker = held[name].replay(history, resend.key, any_exchange=resend.retry > 0)
            if marker is not None:
                log.info("session %s: a resend of an exchange it holds (retry %d), answered from the ledger",
                         name, resend.retry)
                return replayed(marker, request.model)
        for name in reversed(names):  # a resend of a request a killed server answered and never noted
            if held[name].asked is not None and held[name].asked.history == history:  # type: ignore[union-attr]
                reply = await asyncio.to_thread(recovered, self.ledger, name, held[name], request.model)
                if reply is not None:
                    log.info("session %s: a resend of a request answered before a restart, answered from the "
                             "ledger", name)
                    return reply
        decisions = {n: decide(held[n].items(), digests) for n in names}
        # Continuing needs something new to answer; a history that only leaves out (a rewind) forks.
        going = [n for n in names if decisions[n].kind == "continue" and decisions[n].kept < len(digests)]
        # Nothing new, only the last reply left out (one not answered from the ledger above): asked again.
        reasked = {n: r for n in names if not going and (r := held[n].reask(decisions[n])) is not None}
        if reasked:
            decisions.update(reasked)
            going = [max(reasked, key=names.index)]
        if going:
            name = max(going, key=lambda n: (decisions[n].kept, -len(decisions[n].withdrawn), names.index(n)))
        else:
            parent = max(names, key=lambda n: (decisions[n].common, names.index(n)))
            # Named from the folder as it is now, not the lineage kept: a session named like a fork of this
            # key by another client's header since is never written into.
            names = await asyncio.to_thread(self._lineage, key)
            name = f"{key}.f{len(names)}"
            common = decisions[parent].common
            log.info("session %s changes a message of %s after %d items: forked as %s", key, parent, common, name)
            try:
                held[name] = await asyncio.to_thread(fork, self.ledger, parent, name, held[parent], common)
            except BaseException:  # the fork may be half written: the next request lists the lineage anew
                self._lineages.pop(key, None)
                raise
            decisions[name] = decide(held[name].items(), digests)
            names = [*names, name]
        self._lineages[key] = names
        decision = decisions[name]
        self._keys[name] = key
        conversation = await self._conversation(name, request, held[name])
        return conversation, Routed(request.items[decision.kept:], decision.withdrawn, history, resend.key,
                                    again=name in reasked)

    def _lineage(self, key: str) -> list[str]:
        """``key`` and its forks (``key.f1``, ``key.f2``, ...), oldest first."""
        prefix = f"{key}.f"
        forks = [n for n in self.ledger.sessions() if n.startswith(prefix) and n[len(prefix):].isdigit()]
        return [key, *sorted(forks, key=lambda n: int(n[len(prefix):]))]

    async def _conversation(self, name: str, request: ClientRequest, held: Held) -> Conversation:
        signature = (request.system, *sorted(t.name for t in request.tools))
        current = self.conversations.get(name)
        if current is not None and current.signature == signature:
            return current
        if current is not None:  # the client changed its system prompt or tools: bind them anew
            await current.session.close()
        session = await self._session(name, request)
        self.conversations[name] = conversation = Conversation(name, session, held, signature)
        return conversation

    async def _session(self, name: str, request: ClientRequest) -> Session:
        """The conversation's session, bound once: whether the client's tools go behind find_tools is decided
        as it binds, on the horizon of the profile it binds (``defer_tools``)."""
        tools = [tool(_client_side, name=t.name, description=t.description or t.name, schema=t.schema)
                 for t in request.tools]
        c = self.config
        session = self.engine.session(name, model=c.upstream, base_url=c.base_url, api_key=c.upstream_key,
                                      http_client=self.client, tools=tools, identity=request.system or None,
                                      window=c.window, horizon=c.horizon,
                                      max_tokens=int(request.max_tokens or c.max_tokens), rules=c.rules,
                                      calls=c.calls, summaries=c.summaries, defer_tools=c.defer_tools,
                                      stated_pass=c.stated_pass)
        await session.start()
        return session

    async def close(self) -> None:
        for stream in list(self._streams):  # their clients are gone with the server: end their turns
            stream.leave()
        await asyncio.gather(*(s.task for s in list(self._streams) if s.task is not None), return_exceptions=True)
        await asyncio.gather(*list(self._summaries), return_exceptions=True)  # written before the sessions close
        for key in {self._keys.get(n, n) for n in self.conversations}:
            # Under the session's lease: one another worker served since is forgotten, not closed (its
            # open turn is that worker's now).
            try:
                await self._acquire(key)
            except Elsewhere:
                await self._forget(key)
                continue
            try:
                await self._forget(key, close_turns=True)
            finally:
                self.locks.release(key)
        await self.locks.close()
        if self._own_client:
            await self.client.aclose()


async def _pin(session: Session, pins: Sequence[tuple[str, str]]) -> None:
    for category, text in pins:
        await pin_stated(session, text, category=category, key=None, via="serve")


def build_app(engine: Engine, config: ServeConfig, client: httpx.AsyncClient | None = None,
              locks: SessionLocks | None = None) -> Starlette:
    """The app; its lifespan closes the served sessions (an open turn's card says it was cancelled).
    ``locks``: what serialises a session's requests (serve/leases.py; default: a lock per session here)."""
    from vak_context.context.rules.setting import CALLERS, rule_setting

    rule_setting(config.rules, CALLERS)  # a wrong setting fails here, not at the first request
    server = Server(engine, config, client, locks)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.close()

    app = Starlette(routes=[
        Route("/v1/chat/completions", _endpoint(server, config, "openai", openai_reply, OpenAIEvents),
              methods=["POST"]),
        Route("/v1/messages", _endpoint(server, config, "anthropic", anthropic_reply, AnthropicEvents),
              methods=["POST"]),
        Route("/v1/models", _models(config), methods=["GET"]),
        Route("/health", _health, methods=["GET"]),
    ], lifespan=lifespan)
    app.state.server = server
    return app


def _endpoint(server: Server, config: ServeConfig, protocol: Protocol, render: Callable[[Reply], dict[str, Any]],
              events: Callable[[str], Events]) -> Callable[[Request], Any]:
    """The route of one protocol: the key checked, the body bounded and read, the request driven."""

    async def answer(request: Request) -> Response:
        key = client_key(request)
        refused = _unauthorised(config, protocol, key)
        if refused is not None:
            return refused
        try:
            # Bounded before it is parsed, and its shape checked before anything reads it into a session
            # (serve/bodies.py, serve/shapes.py): a refused body starts no session and writes nothing. Only
            # what the conversation's last body did not hold is checked and read (serve/reading.py).
            check_content_type(request.headers.get("content-type"))
            data = await read_body(request.stream(), request.headers.get("content-length"), limit=config.max_body,
                                   idle_s=config.idle_s)
            header = request.headers.get(SESSION_HEADER)
            client_request = server.reader.read(protocol, data, header)
            session = server.key_of(client_request, header)
            rules = request_rules(request.headers.get(RULES_HEADER))
            pins = request_pins(request.headers.getlist(PIN_HEADER))
            resend = Resend.of(request.headers)
            if client_request.stream:
                return await streamed(protocol, server.stream(client_request, session, rules, resend, pins),
                                      events(client_request.model))
            reply = await server.handle(client_request, session, rules, resend, pins)
        except Exception as exc:
            return error_response(protocol, exc)
        return JSONResponse(render(reply))

    return answer


def _unauthorised(config: ServeConfig, protocol: Protocol, key: str) -> Response | None:
    if config.client_key is None or hmac.compare_digest(key.encode(), config.client_key.encode()):
        return None
    status, body = error_body(protocol, "auth", "a wrong or missing API key: send this run's key "
                              "(the file vak serve printed) as the Bearer token or x-api-key")
    return JSONResponse(body, status_code=status)


async def _health(request: Request) -> Response:  # the one route without a key: it tells nothing but "up"
    return JSONResponse({"status": "ok"})


def _models(config: ServeConfig) -> Callable[[Request], Any]:
    """``/v1/models``: the one model served, in the shape of the protocol the client speaks."""

    async def models(request: Request) -> Response:
        protocol: Protocol = "anthropic" if "anthropic-version" in request.headers else "openai"
        refused = _unauthorised(config, protocol, client_key(request))
        if refused is not None:
            return refused
        if "anthropic-version" in request.headers:
            return JSONResponse({"data": [{"type": "model", "id": config.model, "display_name": config.model,
                                           "created_at": "1970-01-01T00:00:00Z"}],
                                 "has_more": False, "first_id": config.model, "last_id": config.model})
        return JSONResponse({"object": "list", "data": [{"id": config.model, "object": "model", "created": 0,
                                                         "owned_by": "vak"}]})

    return models
