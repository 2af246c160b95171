"""A session of the public API (:class:`Session`, made by :meth:`vak_context.engine.api.Engine.session`): one
conversation bound to one model, its turns (:meth:`Session.run`, :meth:`Session.begin`), its cards and its
stated state; and the choices its options are checked against, once, before anything binds.

Re-exported by :mod:`vak_context.engine.api` (the public import path); its loop is wired by
:mod:`vak_context.engine.session_loop`.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Collection, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from vak_context.engine.caller import Turn
from vak_context.engine.results import Card, Stated, TurnResult, card_of, stated_of, step_of
from vak_context.engine.session_loop import SessionOptions
from vak_context.errors import InvalidInput

if TYPE_CHECKING:
    import httpx

    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.agent.loop import StepReport, TurnLoop, TurnReport
    from vak_context.storage.ledger import LedgerStore

REPEAT_RULES = ("close", "redo")  # Session(repeat_rule=...): TurnConfig.repeat_rule
CALLS = ("text", "native")  # Session(calls=...): TurnConfig.text_calls (context/request/toolcalls.calls_in_text)
SUMMARIES = ("on", "off")  # Session(summaries=...): whether packet summaries call a model
STATED_PASSES = ("deterministic", "model")  # Session(stated_pass=...): how stated items are read at turn close
DEFER_TOOLS = ("never", "auto", "always")  # Session(defer_tools=...): ToolRegistry.deferring


class EngineLink(Protocol):
    """What a session needs of its engine (:class:`vak_context.engine.api.Engine`): the folder, when search
    indexes catch up, its ledger, and to be told the session closed."""

    search_index: str

    @property
    def folder(self) -> Path: ...

    def ledger(self) -> LedgerClient: ...

    def _forget(self, name: str) -> None: ...


def _check_rules(value: Any) -> None:
    """A rules setting (``rules=``), checked when given: InvalidRules names what is allowed."""
    from vak_context.context.rules.setting import ENGINE_LOOP, rule_setting

    rule_setting(value, ENGINE_LOOP)


def check_choices(*, rules: Any, calls: str | None, summaries: str, defer_tools: str, repeat_rule: str,
                  stated_pass: str = "deterministic") -> None:
    """``Engine.session``'s settings of a fixed set of choices, checked before anything binds."""
    _check_rules(rules)
    if calls is not None and calls not in CALLS:
        raise InvalidInput(f"calls must be one of {', '.join(map(repr, CALLS))} or None (got {calls!r})")
    if summaries not in SUMMARIES:
        raise InvalidInput(f"summaries must be one of {', '.join(map(repr, SUMMARIES))} (got {summaries!r})")
    if stated_pass not in STATED_PASSES:
        raise InvalidInput(f"stated_pass must be one of {', '.join(map(repr, STATED_PASSES))} (got {stated_pass!r})")
    if defer_tools not in DEFER_TOOLS:
        raise InvalidInput(f"defer_tools must be one of {', '.join(map(repr, DEFER_TOOLS))} (got {defer_tools!r})")
    if repeat_rule not in REPEAT_RULES:
        raise InvalidInput(f"repeat_rule must be one of {', '.join(map(repr, REPEAT_RULES))} (got {repeat_rule!r})")


class Session:
    """One conversation of an :class:`~vak_context.engine.api.Engine`, bound to one model. Made by :meth:`Engine.session`; bound
    on first use (``async with``, the first :meth:`run` or :meth:`begin`); ``await close()`` when done."""

    def __init__(self, engine: EngineLink, store: LedgerStore | None, name: str, options: SessionOptions) -> None:
        self.name, self.model = name, options.model
        self._engine, self._store, self._options = engine, store, options
        self._loop: TurnLoop | None = None
        self._stack = ExitStack()  # the bundled model's server, when there is one
        self._client: httpx.AsyncClient | None = None  # the client this session made (and closes)
        self._turn = asyncio.Lock()
        self._caller: Turn | None = None  # the caller's-loop turn open now, if any
        self._closed = False
        self._rules: Any = options.rules

    @property
    def rules(self) -> str | None:
        """The rules setting as given (``Engine.session(rules=...)`` or set here), in its string form; None:
        each driver's default (``enforce`` in :meth:`run`, ``observe`` in :meth:`begin`). Set it to change
        what the turn rules may do from the next step on, also inside an open turn of your loop."""
        value = self._rules
        if value is None or isinstance(value, str):
            return value
        return ",".join(f"{rule}={mode}" for rule, mode in value.items())  # a mapping: overrides only

    @rules.setter
    def rules(self, value: str | Mapping[str, str] | None) -> None:
        _check_rules(value)
        self._rules = dict(value) if isinstance(value, Mapping) else value
        if self._loop is not None and (self._caller is not None or self._turn.locked()):
            self._loop.rules.setting = self._rule_setting(caller=self._caller is not None)

    def _rule_setting(self, *, caller: bool) -> Any:
        from vak_context.context.rules.setting import CALLERS, ENGINE_LOOP, rule_setting

        return rule_setting(self._rules, CALLERS if caller else ENGINE_LOOP)

    async def start(self) -> Session:
        """Bind the model, the profile and the tools (idempotent; :meth:`run` does it on first use)."""
        if self._closed:
            raise InvalidInput(f"session {self.name!r} is closed; open it again with engine.session({self.name!r}, ...)")
        if self._loop is None:
            try:
                self._loop = await self._bind()
            except BaseException:
                await self._release()
                raise
        return self

    async def _bind(self) -> TurnLoop:
        import httpx

        from vak_context.engine.session_loop import bind_loop

        o = self._options
        client: httpx.AsyncClient = o.http_client
        if client is None:
            client = self._client = httpx.AsyncClient(trust_env=False, timeout=900.0)
        return await bind_loop(self.name, o, client, self._stack, self._store, self._engine.folder,
                               index_at_close=self._engine.search_index == "turn-close",
                               on_step=self._on_step if o.on_step is not None else None)

    def _on_step(self, report: StepReport) -> None:
        assert self._options.on_step is not None
        self._options.on_step(step_of(report))

    async def run(self, directive: str) -> TurnResult:
        """One turn: the engine's loop runs until the model answers (or a rule closes the turn). An exception
        while the turn is open (the provider's, a callback's, the ledger's) closes it ``failed`` with its card,
        then propagates; the session stays usable."""
        if not directive.strip():
            raise InvalidInput("the directive is empty; pass the user's request as text")
        self._refuse_second_turn()
        async with self._turn:
            loop = (await self.start())._loop
            assert loop is not None
            loop.rules.setting = self._rule_setting(caller=False)
            return await self._result_of(await loop.run(directive))

    def begin(self, directive: str) -> Turn:
        """One turn of the caller's loop (:mod:`vak_context.engine.caller`): ``turn = await
        session.begin(directive)`` or ``async with session.begin(directive) as turn``; then
        ``turn.request()`` / ``turn.reply(body, status)`` / ``turn.tool_result(call_id, body)`` until it is
        done. The engine plans, records and judges each step as in :meth:`run`; you send each request with
        your own client and run your own tools."""
        if not directive.strip():
            raise InvalidInput("the directive is empty; pass the user's request as text")
        return Turn(self, directive)

    async def reopen(self, calls: Collection[str] | None = None,
                     results: Mapping[str, str] | None = None) -> Turn | None:
        """The turn of your loop this session's ledger holds open, taken up where it stopped: a process that
        drove it stopped (a SIGKILL) after a reply's calls went out and before their results came back. The
        turn comes back waiting for those results (``turn.pending``): hand them back with
        ``turn.tool_result`` and go on as with any turn; nothing is recorded again. ``calls``: only if the
        calls waiting are exactly these ids. A turn whose last step's results are all stored already (the
        process stopped while the next request was on its way) is taken up only where ``results`` (call id:
        the result's text) are those same bytes: nothing is pending then, and ``turn.request()`` follows.
        None where the ledger holds no such turn (its last turn has a card); begin a new turn then."""
        from vak_context.engine.caller import left_open

        if self._closed:
            raise InvalidInput(f"session {self.name!r} is closed; open it again with engine.session({self.name!r}, ...)")
        self._refuse_second_turn()
        found = await asyncio.to_thread(left_open, self._engine.ledger(), self.name)
        if found is None or (calls is not None and set(calls) != {i for i, _, _ in found.calls}):
            return None
        if found.stored and (results is None or any(results.get(i, "").encode("utf-8") != body
                                                    for i, body in found.stored.items())):
            return None  # stored with other bytes, or the caller did not say: not a resend of those results
        turn = Turn(self, found.directive)
        return turn if await turn._reopen(found) else None

    def _refuse_second_turn(self) -> None:
        if self._turn.locked() or self._caller is not None:
            raise InvalidInput(f"session {self.name!r} is already running a turn; finish it (or close it) "
                               "before the next")

    async def _claim(self, turn: Turn) -> TurnLoop:
        """The bound loop, held for ``turn`` until it ends (a caller's-loop turn spans many calls)."""
        self._refuse_second_turn()
        self._caller = turn
        try:
            loop = (await self.start())._loop
        except BaseException:
            self._caller = None
            raise
        assert loop is not None
        loop.rules.setting = self._rule_setting(caller=True)
        return loop

    def _release_turn(self, turn: Turn) -> None:
        if self._caller is turn:
            self._caller = None

    def _stepped(self, report: StepReport) -> None:
        if self._options.on_step is not None:
            self._on_step(report)

    async def _result_of(self, report: TurnReport | None) -> TurnResult:
        assert report is not None
        return TurnResult(report.answer, report.outcome, await self._card(report.card_id),
                          tuple(step_of(s) for s in report.steps))

    def cards(self) -> list[Card]:
        """The cards of the session's closed turns, oldest first (a failed turn's too). For sync code (a
        script, a notebook cell): on Ray it waits on the EvidenceActor, so from async code use
        :meth:`cards_async`, which does not hold up the event loop while the actor answers."""
        return self._cards_of(self._evidence_call("index", blocking=True))

    async def cards_async(self) -> list[Card]:
        """:meth:`cards` for async code: on Ray the EvidenceActor's answer is awaited (the event loop runs
        on meanwhile); in-process the same read as :meth:`cards`."""
        return self._cards_of(await self._evidence_call("index"))

    def _cards_of(self, index: Any) -> list[Card]:
        return [card_of(t) for t in index.turns if t.card is not None and t.card_id is not None]

    def _evidence_call(self, method: str, *args: Any, blocking: bool = False) -> Any:
        """``evidence.<method>(session, *args)``: in-process the store's answer; on Ray an awaitable of the
        EvidenceActor's answer (Ray's errors mapped to the project's), or (``blocking``) the answer itself.
        An awaited ObjectRef yields to the event loop: ``ray.get`` would stop it until the actor answers."""
        evidence: Any = self._bound_loop().services.evidence  # type: ignore[attr-defined]
        if self._store is not None:
            value = getattr(evidence, method)(self.name, *args)
            return value if blocking else _ready(value)
        import ray

        from vak_context.actors.ray_errors import map_ray_errors

        ref = getattr(evidence, method).remote(self.name, *args)
        if blocking:
            with map_ray_errors(f"evidence {method}"):
                return ray.get(ref)

        async def answer() -> Any:
            with map_ray_errors(f"evidence {method}"):
                return await ref

        return answer()

    def state(self) -> list[Stated]:
        """The stated state in force (docs/STATE.md): what the user stated that binds later turns, in budget
        order (rules, constraints, goals, facts, preferences). For sync code; on Ray it waits on the
        EvidenceActor, so from async code use :meth:`state_async`."""
        return [stated_of(it) for it in self._evidence_call("stated", blocking=True)]

    async def state_async(self) -> list[Stated]:
        """:meth:`state` for async code."""
        return [stated_of(it) for it in await self._evidence_call("stated")]

    async def pin(self, text: str, *, category: str = "rule", key: str | None = None) -> Stated:
        """Pin ``text`` (the user's words) into the session's stated state: from the next turn on, every request
        carries it in its tail's ``<work_contract>`` (docs/STATE.md). ``category``: ``rule`` (a rule or a
        prohibition), ``constraint`` (a hard constraint or a limit), ``goal``, ``fact`` or ``preference``.
        ``key``: what it is about; unset, the engine keys it as it keys what it recognises in a directive
        (``budget``, ``deadline``, a fact's subject, ...). A later pin or statement of the same key replaces
        it; the same item pinned again writes nothing. Binds the session if it is not bound yet."""
        return await pin_stated(await self.start(), text, category=category, key=key, via="api")

    async def unpin(self, key: str) -> None:
        """Take the item of ``key`` (as :meth:`state` names it) out of the stated state from the next turn on: a
        later statement that it no longer holds. InvalidInput when no item of that key is in force."""
        from vak_context.context.stated.items import norm_key
        from vak_context.events.payloads import WorkContract

        await self.start()
        current = {it.key: it for it in await self.state_async()}
        if norm_key(key) not in current:
            raise InvalidInput(f"no stated item of key {key!r} is in force in session {self.name!r}; "
                               f"session.state() lists the keys: {sorted(current)}")
        item = current[norm_key(key)]
        await self._bound_loop().services.append([WorkContract(
            text=item.text, active=False, category=item.category, key=item.key, via="api")])

    @property
    def request_budget(self) -> int:
        """The most tokens a request's prompt may carry, as the bound profile plans every request
        (``context/capacity/profile.py`` ``request_budget``: the instruction horizon, or the window less the
        output reserve, whichever is smaller). Not the model's window: that is :attr:`declared_window`."""
        return self._bound_loop().profile.usable_window

    @property
    def window(self) -> int:
        """Deprecated (0.1, removed in 0.2): :attr:`request_budget`, the prompt budget. The name said window
        where ``window=`` everywhere else is the model's declared window (:attr:`declared_window`)."""
        warnings.warn("Session.window is deprecated: it is the prompt budget, use Session.request_budget "
                      "(the model's window is Session.declared_window)", DeprecationWarning, stacklevel=2)
        return self.request_budget

    @property
    def declared_window(self) -> int:
        """The bound model's context window in tokens, as its provider (or the caller's ``window=``) states it."""
        return self._bound_loop().profile.declared_window

    @property
    def horizon(self) -> int:
        """The bound profile's instruction horizon in tokens: measured by a probe, else the metadata rung's."""
        return self._bound_loop().profile.instruction_horizon.tokens

    @property
    def calls(self) -> str:
        """How the bound model's tool calls are read: ``"text"`` (parsed from its replies' text too) or
        ``"native"`` (the provider's tool calls only): the ``calls=`` given, else measured, else the default."""
        return "text" if self._bound_loop().config.text_calls else "native"

    @property
    def tokens_per_char(self) -> float:
        """The bound profile's calibrated tokens per character of a request (updated by every receipt)."""
        return self._bound_loop().profile.tokens_per_char.value

    def describe_profile(self) -> str:
        """The bound profile in a few lines (window, horizon and where it came from, tokens per char, cache)."""
        from vak_context.context.capacity.profile import describe

        return describe(self._bound_loop().profile)

    async def _card(self, card_id: str) -> Card:
        """One closed turn's card (on Ray from the EvidenceActor, awaited: it runs inside the turn's task; the
        card the turn's close just wrote is handed back by that call, ``closed_card`` of either services)."""
        closed = getattr(self._bound_loop().services, "closed_card", None)
        known = closed(card_id) if closed is not None else None
        return Card(**(known if known is not None else await self._evidence_call("card", card_id)))

    def _bound_loop(self) -> TurnLoop:
        if self._loop is None:
            raise InvalidInput(f"session {self.name!r} is not bound yet: await session.start() or run a turn")
        return self._loop

    async def close(self) -> None:
        """Release the session: its HTTP client (one it made), the bundled model's server, its name in the
        engine. The ledger keeps everything; the session can be opened again."""
        if self._closed:
            return
        if self._caller is not None:  # a caller's-loop turn left open: its card says it was cancelled
            await self._caller.close()
        self._closed = True
        await self._release()
        self._engine._forget(self.name)

    async def _release(self) -> None:
        from vak_context.actors.evidence import EvidenceActor

        evidence = getattr(self._loop.services, "evidence", None) if self._loop is not None else None
        if isinstance(evidence, EvidenceActor):  # in-process: commit its card index's buffer
            await asyncio.to_thread(evidence.close)
        self._stack.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _stop_sync(self) -> None:
        self._closed = True
        self._stack.close()

    async def __aenter__(self) -> Session:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


async def _ready(value: Any) -> Any:
    """An in-process answer as an awaitable, so both paths of ``_evidence_call`` are awaited alike."""
    return value


async def pin_stated(session: Session, text: str, *, category: str, key: str | None, via: str) -> Stated:
    """:meth:`Session.pin`, with how the item came in (``vak serve`` pins with ``via="serve"``)."""
    from vak_context.context.stated.extract import classify
    from vak_context.context.stated.items import CATEGORIES, norm_key
    from vak_context.events.payloads import WorkContract

    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("pin needs the statement as text, in the user's words: session.pin('Never push to main')")
    if category not in CATEGORIES:
        raise InvalidInput(f"category must be one of {', '.join(map(repr, CATEGORIES))} (got {category!r})")
    if key is not None and not norm_key(key):
        raise InvalidInput(f"key must name what the statement is about, in words (got {key!r}); or leave it unset")
    current = await session._evidence_call("stated")
    draft = classify(text.strip(), category, tuple(current))
    assert draft is not None  # a statement with its category given is always an item
    item_key = norm_key(key) if key is not None else draft.key
    same = next((it for it in current if it.key == item_key), None)
    if same is not None and same.text == text.strip() and same.category == category:
        return stated_of(same)
    entry = (await session._bound_loop().services.append([WorkContract(
        text=text.strip(), category=category, key=item_key, via=via)]))[0]
    return Stated(id=entry, category=category, text=text.strip(), key=item_key, turn=None, via=via)
