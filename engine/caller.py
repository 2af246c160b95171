"""The caller's loop: the embedder sends each request with their own client and runs their own tools; the
engine plans, projects, records and judges every step as in its own loop.

::

    async with session.begin("Find the open invoices of ACME") as turn:
        while (request := await turn.request()) is not None:
            reply = await my_client.post(request.url, json=request.body, headers=my_auth | request.headers)
            action = await turn.reply(reply.json(), status=reply.status_code)
            for call in action.calls:
                await turn.tool_result(call.id, my_tools[call.name](**call.arguments))
    print(turn.result.answer)

A :class:`Turn` drives :class:`vak_context.agent.turn.OpenTurn`, the one implementation of a turn the
engine's loop (:class:`vak_context.agent.loop.TurnLoop`) drives too: the plan and its re-plans, the
over-length retry (an over-length error handed to :meth:`Turn.reply` corrects the profile and re-plans the
next request once), inline-call parsing (a model that writes its calls as text), receipts and feedback, the turn rules, ``recall``,
``find_tools`` and ``session_search`` (answered inside: only world calls reach the caller), cache-break activities, the card.
Requests are rendered by the bound model's adapter (``render()``) for its wire format and replies parsed
by it (``parse()``, ``map_error()``); packets, summaries and exact counts use the session's own provider
and client, as :meth:`~vak_context.engine.api.Session.run` does. The key never appears in a request given
out: the caller's client sends its own.

Every turn ends with a card: an exception inside ``async with`` (the caller's code or the engine's) closes
the turn ``failed`` with a ``turn.failed`` activity naming it, then propagates; a cancel closes it
``cancelled``; :meth:`Turn.close` of an unfinished turn closes it ``cancelled``. Misuse (a reply before a
request, a result for an unknown call, a request while results are pending, a second open turn) is an
:class:`~vak_context.errors.InvalidInput` that says what to do.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from vak_context.engine.results import TurnResult
from vak_context.errors import InvalidInput, RequestTooLarge

if TYPE_CHECKING:
    from vak_context.agent.loop import TurnLoop
    from vak_context.agent.turn import OpenTurn, StepReport, TurnReport, WorldCall
    from vak_context.providers.base import Provider

T = TypeVar("T")


class Host(Protocol):
    """What a turn needs of its session (:class:`vak_context.engine.api.Session`): the bound loop, held
    for the turn; its step hook; the result of a closed turn."""

    async def _claim(self, turn: Turn) -> TurnLoop: ...

    def _release_turn(self, turn: Turn) -> None: ...

    def _stepped(self, report: StepReport) -> None: ...

    async def _result_of(self, report: TurnReport | None) -> TurnResult: ...


@dataclass(frozen=True)
class ModelRequest:
    """The next request of a turn, rendered for the bound model's wire format: POST ``body`` (JSON) to
    ``url`` with your client's own auth headers (and Anthropic's ``anthropic-version``) plus ``headers``
    (what this body needs beyond those, e.g. a beta feature it uses). Holds no key."""

    body: dict[str, Any]
    url: str  # the bound provider's base URL and ``path``
    path: str  # e.g. /chat/completions, /responses, /messages, /models/<model>:generateContent
    model: str
    wire: str  # the adapter: openai, openai-compat, openai-responses, anthropic, gemini, ...
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """A call of one of your tools the model made: run it, then ``await turn.tool_result(call.id, ...)``."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Action:
    """What to do after a reply: run ``calls`` (then :meth:`Turn.request` again), or, when ``done``, read
    ``answer`` (and :attr:`Turn.result`). No calls and not done: the engine answered the step's calls
    itself (``recall``, ``find_tools``, ``session_search``) or re-planned an over-length request; send :meth:`Turn.request`."""

    calls: tuple[Call, ...] = ()
    done: bool = False
    answer: str = ""


class Turn:
    """One turn of the caller's loop; made by :meth:`Session.begin` (await it, or ``async with`` it)."""

    def __init__(self, session: Host, directive: str) -> None:
        self.session, self.directive = session, directive
        self._turn: OpenTurn | None = None
        self._provider: Provider | None = None
        self._sent: ModelRequest | None = None
        self._sent_at = 0.0
        self._world: dict[str, WorldCall] = {}  # pending world calls by id
        self._outcomes: dict[int, tuple[str, bool]] = {}  # engine answers and world results, by position
        self._ended = False
        self._result: TurnResult | None = None
        # The packet summary the session's next request will need is written as this turn closes (inside
        # the call that closed it). False: call summarise_ahead() once your reply is out (vak serve does).
        self.summarise_at_close = True

    # ------------------------------------------------------------ opening and closing

    def __await__(self) -> Generator[Any, None, Turn]:
        return self._open().__await__()

    async def __aenter__(self) -> Turn:
        return await self._open()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is None or self._turn is None:
            await self.close()
        else:
            await self._fail(exc)

    async def _open(self) -> Turn:
        if self._turn is not None:
            return self
        from vak_context.providers.base import Provider

        loop = await self.session._claim(self)
        try:
            provider = loop.provider
            if not isinstance(provider, Provider):
                raise InvalidInput("the caller's loop renders requests with a provider adapter; bind the session "
                                   "to a provider:model spec")
            self._provider, self._turn = provider, loop.open_turn(self.directive, caller=True)
            await self._turn.started()
        except BaseException:
            self.session._release_turn(self)
            raise
        await self._guard(self._turn.begin)
        return self

    async def _reopen(self, found: LeftOpen) -> bool:
        """Take up the turn ``found`` names (``Session.reopen``): claimed as an open turn whose calls wait
        for their results (``pending``). False, with nothing written and the session free, when the turn
        cannot be taken up (a call of its last step is not one the caller runs)."""
        from vak_context.providers.base import Provider

        loop = await self.session._claim(self)
        try:
            provider = loop.provider
            if not isinstance(provider, Provider):
                raise InvalidInput("the caller's loop renders requests with a provider adapter; bind the session "
                                   "to a provider:model spec")
            self._provider, self._turn = provider, loop.open_turn(self.directive, caller=True)
            await self._turn.started()
            world = await self._turn.reopen(found.directive_id, found.tail, found.step_id, found.index, found.text,
                                            found.calls, answered=bool(found.stored))
        except BaseException:
            self.session._release_turn(self)
            raise
        if world is None:
            self._turn = None
            self.session._release_turn(self)
            return False
        self._world = {c.tool_use_id: c for c in world}
        return True

    async def close(self) -> None:
        """End the turn: an unfinished one is closed ``cancelled`` (its card says so). Idempotent."""
        if self._ended or self._turn is None:
            return
        turn = self._turn
        if turn.open:
            try:
                await asyncio.shield(turn.close_cancelled())
            except BaseException:
                await self._end()
                raise
        await self._end()

    async def accept(self) -> None:
        """End the turn on the model's last reply, as your framework did: a turn still open only because a
        rule asked for one more model call after a reply with no tool call closes ``completed`` with that reply
        as its answer (a rule never cancels a run you finished). Any other unfinished turn is closed as by
        :meth:`close`. Idempotent."""
        turn = self._turn
        if self._ended or turn is None:
            return
        if turn.open and not self.pending and self._sent is None:
            await self._guard(turn.accept)
        await self.close()

    async def _fail(self, exc: BaseException) -> None:
        """The caller's code raised (or the task was cancelled) inside ``async with``: the card records it."""
        turn = self._turn
        if self._ended or turn is None:
            return
        try:
            if turn.open and isinstance(exc, asyncio.CancelledError):
                await asyncio.shield(turn.close_cancelled())
            elif turn.open and isinstance(exc, Exception):
                await turn.close_failed(exc)
        finally:
            await self._end()

    async def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        turn = self._turn
        assert turn is not None
        try:
            await turn.finished(ahead=self.summarise_at_close)
        finally:
            self.session._release_turn(self)
        if turn.card_id:
            self._result = await self.session._result_of(turn.report)

    async def summarise_ahead(self) -> None:
        """Write the packet summary the session's next request will need, for a turn made with
        ``summarise_at_close = False``, once it is done (a call to the summariser, where one is due). Nothing
        for a turn that failed or was cancelled, or once the session's next turn has begun. Idempotent."""
        if not self._ended or self._turn is None:
            raise InvalidInput("summarise_ahead(): the turn is still open; call it once the turn is done")
        await self._turn.summarise_ahead()

    async def _guard(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run one step of the turn; any exception closes the turn (``failed``, or ``cancelled`` for a
        cancel) and propagates, as in the engine's loop."""
        turn = self._turn
        assert turn is not None
        try:
            value = await step()
        except BaseException as exc:
            await self._fail(exc)
            raise
        if turn.done:
            await self._end()
        return value

    # ------------------------------------------------------------ the steps

    @property
    def done(self) -> bool:
        """True once the turn's card is written (read :attr:`result`)."""
        return self._ended or (self._turn is not None and self._turn.done)

    @property
    def result(self) -> TurnResult:
        """The closed turn's result, the same as :meth:`Session.run` gives."""
        if self._result is None:
            raise InvalidInput("the turn is still open: send its requests until request() gives None or "
                               "reply() says done, or close it")
        return self._result

    @property
    def too_large(self) -> RequestTooLarge | None:
        """Why :meth:`request` gave None for a turn that had not answered: not even the turn at its most
        compact fits the bound model (its ``needed`` and ``available`` tokens; nothing was sent). None else."""
        return self._turn.too_large if self._turn is not None else None

    @property
    def pending(self) -> tuple[str, ...]:
        """The ids of the calls whose results are still to be handed back."""
        return tuple(i for i, c in self._world.items() if c.position not in self._outcomes)

    async def request(self) -> ModelRequest | None:
        """The next request to send, rendered for the bound model's wire format; None when the turn is done
        (also when not even the turn at its most compact fits the model: ``result`` says why). Asked again
        before its reply is handed back, it gives the same request."""
        turn = self._live("request()")
        if self.pending:
            raise InvalidInput(f"{len(self.pending)} tool call(s) are pending ({', '.join(self.pending)}); hand "
                               "each result back with tool_result(call_id, body) before the next request()")
        if turn.done:
            return None
        if self._sent is not None:
            return self._sent
        assembled = await self._guard(turn.request)
        if assembled is None:
            return None
        from vak_context.providers.base import load_images

        provider = self._provider
        assert provider is not None
        request = load_images(assembled.request)
        body = provider.render(request)
        url = provider.chat_url(request)
        self._sent = ModelRequest(body=body, url=url, path=url.removeprefix(provider.base_url) or "/",
                                  model=request.model, wire=provider.name, headers=provider.body_headers(body))
        self._sent_at = time.perf_counter()
        return self._sent

    async def reply(self, body: Mapping[str, Any] | str | bytes, status: int = 200) -> Action:
        """Hand back the provider's reply to the last request (its JSON body and HTTP status). A success is
        parsed by the adapter and recorded; the :class:`Action` says what to do next. An over-length error
        re-plans the next request once (a second one closes the turn ``failed``); any other error status
        closes the turn ``failed`` and raises the adapter's typed
        :class:`~vak_context.errors.ProviderError`."""
        turn = self._live("reply()")
        if self._sent is None:
            raise InvalidInput("reply() came before request(): call request(), send its body, then hand back "
                               "the provider's reply")
        latency_ms = (time.perf_counter() - self._sent_at) * 1000.0
        sent, self._sent = self._sent, None
        decoded = _decoded(body)

        async def step() -> Action:
            if 200 <= status < 300:
                return await self._success(decoded, latency_ms, sent.model)
            from vak_context.errors import ContextOverflow

            provider = self._provider
            assert provider is not None
            error = provider.map_error(status, decoded)
            if not isinstance(error, ContextOverflow):
                raise error
            await turn.rejected(error)
            return self._action()

        return await self._guard(step)

    async def _success(self, decoded: Any, latency_ms: float, model: str) -> Action:
        from vak_context.errors import ProviderRequestError

        turn, provider = self._turn, self._provider
        assert turn is not None and provider is not None
        if not isinstance(decoded, dict):
            raise ProviderRequestError(f"{provider.name}: the reply is not a JSON object; hand back the "
                                       f"provider's JSON body from {provider.chat_path}", provider=provider.name)
        result = provider.parse_checked(decoded, latency_ms)
        if not result.model:
            result = result.model_copy(update={"model": model})
        report = await turn.replied(provider._redact_result(result))
        self.session._stepped(report)
        world = await turn.judge()
        if turn.calling:
            self._outcomes = await turn.answer_engine()
            self._world = {c.tool_use_id: c for c in world}
            if not world:  # only the engine's calls: their results are in
                await self._take()
        return self._action()

    async def tool_result(self, call_id: str, body: Any, is_error: bool = False) -> None:
        """The result of one call :meth:`reply` gave: a str as it is, JSON values encoded, an exception as
        the error result naming its type and message (the model reads it; the turn goes on). Any order;
        once every call's result is in, they are stored in the model's call order: then :meth:`request`."""
        self._live("tool_result()")
        call = self._world.get(call_id)
        if call is None:
            pending = ", ".join(self.pending) or "none"
            raise InvalidInput(f"tool_result({call_id!r}): no pending call has that id (pending: {pending}); "
                               "pass the id of a call the last reply() gave")
        if call.position in self._outcomes:
            raise InvalidInput(f"tool_result({call_id!r}): its result was already handed back; each call takes one")
        from vak_context.agent.tools.registry import encode_result, error_text

        if isinstance(body, BaseException):
            text, is_error = error_text(call.name, body), True
        else:
            text = encode_result(body)
        self._outcomes[call.position] = (text, bool(is_error))
        if not self.pending:
            await self._guard(self._take)

    async def earlier_step(self, calls: Sequence[Call], results: Mapping[str, tuple[Any, bool]], *,
                           stored: Mapping[str, str] | None = None) -> str:
        """Calls the model made before this turn opened, with their results, from your own history: the turn
        they were made in is gone (your process, or a server in front of it, restarted between the reply
        and its results). Recorded as the turn's first step and each result stored as evidence, as
        :meth:`tool_result` stores it (``results``: call id to ``(body, is_error)``, every call's), so the
        next :meth:`request` carries them windowed like any result, never quoted into the directive.
        ``stored``: call id to the evidence id of a result the session already holds (a retry of this
        exchange): referred to, not stored again. Only before the turn's first :meth:`request`. The step's
        entry id."""
        turn = self._live("earlier_step()")
        if self._sent is not None or turn.steps or self._world or turn.done:
            raise InvalidInput("earlier_step(): only before the turn's first request(); begin a new turn for it")
        missing = [c.id for c in calls if c.id not in results]
        if not calls or missing:
            raise InvalidInput(f"earlier_step(): every call needs its result (missing: {', '.join(missing) or 'no calls'}); "
                               "pass results as {call_id: (body, is_error)}")
        from vak_context.agent.tools.registry import encode_result, error_text

        outcomes = []
        for call in calls:
            body, is_error = results[call.id]
            outcomes.append((error_text(call.name, body), True) if isinstance(body, BaseException)
                            else (encode_result(body), bool(is_error)))
        known = dict(stored or {})
        return await self._guard(lambda: turn.earlier_step([(c.id, c.name, c.arguments) for c in calls], outcomes, known))

    async def note(self, activity: str, detail: Mapping[str, Any]) -> str:
        """Append an ``activity`` entry of your own (``detail``: JSON values) to the open turn, in order with
        the turn's own entries: what your driver did around the turn (``vak serve`` notes each client request
        it answers, ``serve.asked`` and ``serve.history``). The session's ledger takes no other append while
        a turn is open; between turns, append to it directly. The entry's id."""
        turn = self._live("note()")
        if turn.done:
            raise InvalidInput("note(): the turn is done; append to the ledger between turns")
        from vak_context.events.payloads import Activity

        return (await turn.core.services.append([Activity(activity=activity, detail=dict(detail))]))[0]

    async def _take(self) -> None:
        turn = self._turn
        assert turn is not None
        outcomes, self._outcomes, self._world = self._outcomes, {}, {}
        await turn.take_results(outcomes)

    def _action(self) -> Action:
        turn = self._turn
        assert turn is not None
        if turn.done:
            return Action(done=True, answer=turn.report.answer if turn.report else "")
        return Action(calls=tuple(Call(c.tool_use_id, c.name, dict(c.arguments)) for c in self._world.values()))

    def _live(self, what: str) -> OpenTurn:
        if self._turn is None:
            raise InvalidInput(f"{what}: the turn is not open yet; await session.begin(directive) or use "
                               "async with session.begin(directive) as turn")
        if self._ended and what != "request()":
            raise InvalidInput(f"{what}: the turn is done; read turn.result, or begin the next turn")
        return self._turn


@dataclass(frozen=True)
class LeftOpen:
    """A turn the session's ledger holds open: its directive (id and text) has no card after it, and its
    last step made calls (id, name, arguments) that have no result. ``index``: that step's place in the turn;
    ``tail``: the tail the directive was recorded with."""

    directive_id: str
    directive: str
    tail: str
    step_id: str
    index: int
    text: str
    calls: tuple[tuple[str, str, dict[str, Any]], ...]
    stored: Mapping[str, bytes] = field(default_factory=dict)  # call id: its result's bytes, where all are stored


def left_open(ledger: Any, session: str) -> LeftOpen | None:
    """The turn ``session`` holds open in the ledger whose last step's calls wait for their results (a driver
    stopped between handing the calls out and getting their results back), or have them all stored and no
    step after them (stopped while the next request was on its way: ``stored``), else None. Reads the
    session's directive and card entries, then the open turn's own entries."""
    from vak_context.events.envelope import Mapper

    if session not in ledger.sessions():
        return None
    marks = ledger.entries_of(session, ("directive", "turn_card"))
    if not marks or marks[-1].kind != "directive":
        return None
    mapper, opened = Mapper(), marks[-1]
    tail, steps, last = "", 0, None
    answered: set[str] = set()
    bodies: dict[str, bytes] = {}
    for entry in ledger.entries(session, opened.seq + 1):
        if entry.kind == "turn_tail" and not tail:
            tail = mapper.payload_of(entry).text
        elif entry.kind == "assistant_step":
            steps, last, answered, bodies = steps + 1, entry, set(), {}
        elif entry.kind == "tool_result":
            answered.add(mapper.payload_of(entry).tool_use_id)
        elif entry.kind == "evidence_body":
            bodies.setdefault(mapper.payload_of(entry).tool_use_id, entry.blob or b"")
    if last is None:
        return None
    step = mapper.payload_of(last)
    calls = tuple((b.id, b.name, dict(b.input)) for b in step.tool_uses)
    ids = {i for i, _, _ in calls}
    if not calls or (answered and (answered != ids or set(bodies) != ids)):
        return None  # some results stored and not others, or one not as evidence: not a state a turn waits in
    return LeftOpen(opened.id, mapper.payload_of(opened).text, tail, last.id, steps - 1, step.text, calls,
                    bodies if answered else {})


def _decoded(body: Mapping[str, Any] | str | bytes) -> Any:
    """A reply as the adapter reads it: an object as it is; text decoded from JSON, else kept as text (an
    error page's)."""
    if isinstance(body, Mapping):
        return dict(body)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text)
    except ValueError:
        return text
