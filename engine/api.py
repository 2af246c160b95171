"""The public API: embed the engine in an agent with these names only (``import vak_context``).

::

    import vak_context

    with vak_context.Engine.open("ledger") as engine:
        async with engine.session("support-1", model="openai:gpt-4o-mini", tools=[search]) as session:
            result = await session.run("Find the open invoices of ACME")
            print(result.answer, result.outcome, result.card.text)

An :class:`Engine` owns one ledger folder in this process (its writer: a second writer of a session gets
:class:`~vak_context.errors.SessionLocked`), or serves it on Ray (``Engine.open(folder, ray=True)`` or
``ray="host:port"``), where the folder's LedgerActor owns it and several processes may serve one ledger. A :class:`Session` is one conversation bound to one model; each
:meth:`Session.run` is one turn of the engine's own loop (plan, project, call the model, run the tools, close
the turn with its card); each :meth:`Session.begin` is one turn of the caller's loop (the embedder sends each
request with its own client and runs its own tools: :mod:`vak_context.engine.caller`), the same turn
implementation driven from outside. Every turn ends with a card, also one that raised: it is closed ``failed`` and the
exception propagates; the next turn starts clean.

Importing this module starts nothing and imports neither Ray nor pyarrow: the ledger, the actors' classes
and the providers are imported when an engine is opened or a session bound. docs/EMBEDDING.md has the guide.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from vak_context.engine.caller import Action, Call, ModelRequest, Turn
from vak_context.engine.results import Card, Stated, Step, TurnResult, card_of, stated_of, step_of
from vak_context.errors import InvalidInput, LedgerClosed

if TYPE_CHECKING:
    import httpx

    from vak_context.actors.ledger_client import LedgerClient
    from vak_context.agent.loop import StepReport, TurnLoop, TurnReport
    from vak_context.agent.tools.registry import Tool, ToolRegistry
    from vak_context.storage.ledger import LedgerStore

__all__ = ["Action", "Call", "Card", "Engine", "ModelRequest", "Session", "Stated", "Step", "Turn", "TurnResult"]

# A turn's limits when the embedder sets none: model calls per turn, and tokens per completion.
DEFAULT_MAX_STEPS = 8
DEFAULT_MAX_TOKENS = 512
REPEAT_RULES = ("close", "redo")  # Session(repeat_rule=...): TurnConfig.repeat_rule
CALLS = ("text", "native")  # Session(calls=...): TurnConfig.text_calls (context/request/toolcalls.calls_in_text)
SUMMARIES = ("on", "off")  # Session(summaries=...): whether packet summaries call a model
DEFER_TOOLS = ("never", "auto", "always")  # Session(defer_tools=...): ToolRegistry.deferring
# Engine.open(search_index=...): when a session's search index is caught up from the ledger: in the
# background as each turn closes (and the open turn's entries at a search), or only at a session_search.
SEARCH_INDEX = ("turn-close", "search")


class Engine:
    """The engine over one ledger folder, in this process or on Ray. Open it with :meth:`open`; close it (or
    use it as a context manager) to close its sessions and release the folder."""

    def __init__(self, store: LedgerStore | None, *, ray: _RayLink | None = None,
                 search_index: str = "turn-close") -> None:
        if (store is None) == (ray is None):
            raise InvalidInput("an Engine has a LedgerStore (in-process) or a Ray link, not both: use Engine.open")
        _check_search_index(search_index)
        self.search_index = search_index
        self._store: LedgerStore | None = store
        self._ray = ray
        self._folder = store.root if store is not None else ray.folder  # type: ignore[union-attr]
        self._open = True
        self._sessions: dict[str, Session] = {}

    @classmethod
    def open(cls, ledger_folder: str | os.PathLike[str], *, ray: bool | str | None = None,
             search_index: str = "turn-close") -> Engine:
        """The engine over ``ledger_folder`` (made if missing).

        ``ray`` None or False: in this process, which becomes the folder's writer (a session another
        process or engine writes raises :class:`~vak_context.errors.SessionLocked` when bound). True: on
        Ray: a local cluster started on 127.0.0.1 (or the Ray this process already joined). A string: on
        the running cluster at that address (``host:port`` or ``ray://host:port``). On Ray the folder's
        LedgerActor owns it (several processes may serve one ledger), each role is its actor, and the
        ProbeActor measures each bound model in the background; the folder's path must be the same on
        the cluster's nodes as here.

        ``search_index``: when each session's full-text index (``session_search``, docs/SEARCH.md) is caught
        up from the ledger. ``"turn-close"`` (the default): in the background as each turn closes (in this
        process's store, or in the LedgerActor on Ray), so a search pays only for the open turn's entries;
        ``"search"``: only when the session is searched (its first search indexes all of it). Appends never
        index either way."""
        _check_search_index(search_index)
        folder = Path(ledger_folder)
        if ray is None or ray is False:
            from vak_context.agent.carddocs import catch_up_cards
            from vak_context.storage.ledger import LedgerStore

            # No index on the append path (actors/ledger.py says why): caught up at turn close or search.
            store = LedgerStore(folder)
            catch_up_cards(store)  # card indexes a killed writer left behind the ledger (storage/cardindex.py)
            store.catch_up_index()  # a format-1 ledger's sessions get their index files (storage/ledger_index.py)
            if search_index == "turn-close":  # search indexes a kill left behind or torn, in the background
                from vak_context.storage.catchup import catch_up_behind

                catch_up_behind(store)
            return cls(store, search_index=search_index)
        return cls(None, ray=_RayLink.join(folder, ray), search_index=search_index)

    @property
    def folder(self) -> Path:
        return self._folder

    @property
    def on_ray(self) -> bool:
        """Whether the engine's sessions run on Ray (the folder's actors) rather than in this process."""
        return self._ray is not None

    def ledger(self) -> LedgerClient:
        """The folder's ledger as this engine writes it: a client of its LedgerStore in this process, of the
        folder's LedgerActor on Ray. For tools built on the engine (``vak serve`` notes what each client
        request added and forks diverged sessions through it); the entries' format is internal
        (docs/LEDGER_FORMAT.md). Never append to a session while one of its turns is open."""
        from vak_context.actors.ledger_client import LedgerClient

        store = self._live_store()
        if store is not None:
            return LedgerClient(str(self._folder), store)
        from vak_context.actors.factory import ledger_actor

        return LedgerClient(str(self._folder), ledger_actor(self._folder), coalesce=False)

    def session(self, name: str, *, model: str, tools: ToolRegistry | Iterable[Callable[..., Any] | Tool] = (),
                workspace: str | os.PathLike[str] | None = None, stance: str | None = None,
                identity: str | None = None, window: int | None = None, horizon: int | None = None,
                output_reserve: int | None = None, base_url: str | None = None, api_key: str | None = None,
                http_client: httpx.AsyncClient | None = None, on_step: Callable[[Step], None] | None = None,
                on_text: Callable[[str], None] | None = None, card_tools: bool = False,
                summary_model: str | None = None, summary_base_url: str | None = None,
                max_steps: int = DEFAULT_MAX_STEPS, max_tokens: int = DEFAULT_MAX_TOKENS,
                timezone: str = "UTC", repeat_rule: str = "close",
                rules: str | Mapping[str, str] | None = None, calls: str | None = None,
                summaries: str = "on", defer_tools: str = "never") -> Session:
        """A session named ``name`` (an existing one in the ledger is continued), bound to ``model``.

        ``model``: ``provider:model`` (``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``,
        ``openai-compat:<model>`` with ``base_url=``, ...; the key from ``api_key=`` or the provider's
        environment variable) or ``local:<name>`` (a bundled model, started for the session; the
        ``[local]`` extra). ``tools``: a ToolRegistry or callables (each registered with its hints and
        docstring); ``workspace``: a folder whose read-only workspace tools are added. ``stance`` (the tail's
        per-turn guidance) and ``identity`` (the system prompt's first layer) are the embedder's; unset, the
        engine's defaults. ``window``, ``horizon`` and ``output_reserve`` (tokens) override what the
        provider publishes until a measured profile is recorded in the ledger. ``http_client``: the client
        requests go through (the caller keeps it open and closes it). ``on_step``: called after each step;
        ``on_text``: called with each piece of a step's text as the model streams it (where the adapter
        streams). ``card_tools``: offer the engine's card tools (``emit_*_card``: a structured answer the
        engine validates and records) in the catalogue, reached through ``find_tools``. ``summary_model``:
        a ``provider:model`` spec (``summary_base_url=`` for its server) that writes the packet summaries
        instead of the session's own model (a cheaper one; its key from the provider's environment variable).
        ``repeat_rule``: what a turn's second step that repeats a read-only call with the same arguments
        does: ``"close"`` ends the turn quoting the results it had; ``"redo"`` first asks the model for the
        answer in one more step with calls masked (docs/DRIFT.md).
        ``rules``: what the turn rules (freshness, model drift, echoes, repeated calls, empty steps) may do:
        ``"enforce"`` (nudge, redo, intercept, close the turn with the engine's statement), ``"observe"``
        (only record in the ledger what each rule would have done: the model and the caller see nothing of
        it) or ``"off"``, optionally with per-rule overrides (``"observe,freshness-check=enforce"``, or a
        mapping ``{"freshness-check": "off"}`` over the default). Unset: ``enforce`` in :meth:`Session.run`
        (the engine is the agent), ``observe`` in :meth:`Session.begin` (your loop is). docs/DRIFT.md.
        ``calls``: how the model makes its tool
        calls: ``"text"`` (it writes them in its reply, as the bundled Qwen does: they are parsed from the
        text), ``"native"`` (only the provider's tool calls are calls; the text is the answer, whole); unset,
        the protocol a probe measured for the model, else the bundled model's own, else ``"native"``.
        ``summaries``: ``"on"`` (a model, the session's own or ``summary_model``, writes each packet's summary
        once, when the packet is formed) or ``"off"`` (no summary calls: each packet carries the engine's
        extract of its turns' directives, outcomes and evidence ids; docs/PLANNER.md "Packets").
        ``defer_tools``: ``"auto"`` puts ``tools`` behind ``find_tools`` (listed in the catalogue, each still
        callable by name) when their schemas exceed a quarter of the bound profile's horizon, decided as the
        session binds; ``"always"`` puts them there; ``"never"`` (the default) keeps each as registered.
        """
        _check_rules(rules)
        if calls is not None and calls not in CALLS:
            raise InvalidInput(f"calls must be one of {', '.join(map(repr, CALLS))} or None (got {calls!r})")
        if summaries not in SUMMARIES:
            raise InvalidInput(f"summaries must be one of {', '.join(map(repr, SUMMARIES))} (got {summaries!r})")
        if defer_tools not in DEFER_TOOLS:
            raise InvalidInput(f"defer_tools must be one of {', '.join(map(repr, DEFER_TOOLS))} (got {defer_tools!r})")
        if repeat_rule not in REPEAT_RULES:
            raise InvalidInput(f"repeat_rule must be one of {', '.join(map(repr, REPEAT_RULES))} (got {repeat_rule!r})")
        store = self._live_store()
        if name in self._sessions:
            raise InvalidInput(f"session {name!r} is already open in this engine; use that Session, or close it first")
        options = _Options(model=model, tools=tools, workspace=workspace, stance=stance, identity=identity,
                           window=window, horizon=horizon, output_reserve=output_reserve, base_url=base_url,
                           api_key=api_key, http_client=http_client, on_step=on_step, on_text=on_text,
                           card_tools=card_tools, summary_model=summary_model,
                           summary_base_url=summary_base_url, max_steps=max_steps, max_tokens=max_tokens, timezone=timezone,
                           repeat_rule=repeat_rule, rules=rules, calls=calls,
                           summaries=summaries == "on", defer_tools=defer_tools)
        session = Session(self, store, name, options)
        self._sessions[name] = session
        return session

    def close(self) -> None:
        """Close the ledger (idempotent). Close sessions first (``await session.close()``): a session still
        open is left unusable, and its local model server, if any, is stopped. On Ray the folder's actors
        are detached and stay up for other processes; a local cluster this engine started is stopped."""
        for session in list(self._sessions.values()):
            session._stop_sync()
        self._sessions.clear()
        self._open = False
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._ray is not None:
            self._ray.release()

    def index_idle(self) -> None:
        """Block until no background catch-up of a session's search index is queued or running (with
        ``search_index="turn-close"``: in this process's store, or on Ray in the folder's LedgerActor). For
        tests and benches: turns never wait on it, and closing the engine stops a running one cleanly."""
        store = self._live_store()
        if store is not None:
            store.index_idle()
            return
        import ray

        from vak_context.actors.factory import ledger_actor
        from vak_context.actors.ray_errors import map_ray_errors

        with map_ray_errors("ledger index_idle"):
            ray.get(ledger_actor(self._folder).index_idle.remote())

    def foreground(self) -> AbstractContextManager[None]:
        """Mark a request's own work (not its wait on the model): this process's background catch-ups of
        search indexes give way to it (storage/catchup.py, ``Foreground``); on Ray they run in the
        LedgerActor's process, and nothing is marked."""
        store = self._store if self._open else None
        return store.foreground.hold() if store is not None else nullcontext()

    def _forget(self, name: str) -> None:
        self._sessions.pop(name, None)

    def _live_store(self) -> LedgerStore | None:
        """The folder's writer in this process (None on Ray); LedgerClosed once the engine is closed."""
        if not self._open:
            raise LedgerClosed()
        return self._store

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in list(self._sessions.values()):
            await session.close()
        self.close()


def _check_rules(value: Any) -> None:
    """A rules setting (``rules=``), checked when given: InvalidRules names what is allowed."""
    from vak_context.context.rules.setting import ENGINE_LOOP, rule_setting

    rule_setting(value, ENGINE_LOOP)


def _hold(store: LedgerStore, session: str) -> None:
    """Open ``session`` in ``store`` (its writer lock taken, its segments read) if it exists."""
    if session in store.sessions():
        store.head(session)


def _check_search_index(value: str) -> None:
    if value not in SEARCH_INDEX:
        raise InvalidInput(f"search_index must be one of {', '.join(map(repr, SEARCH_INDEX))} (got {value!r})")


@dataclass(frozen=True)
class _Options:
    model: str
    tools: Any
    workspace: str | os.PathLike[str] | None
    stance: str | None
    identity: str | None
    window: int | None
    horizon: int | None
    output_reserve: int | None
    base_url: str | None
    api_key: str | None
    http_client: Any
    on_step: Callable[[Step], None] | None
    on_text: Callable[[str], None] | None
    summary_model: str | None
    summary_base_url: str | None
    card_tools: bool
    max_steps: int
    max_tokens: int
    timezone: str
    repeat_rule: str
    rules: Any = None  # as given (str, mapping or None: the driver's default); checked by Engine.session
    calls: str | None = None
    summaries: bool = True
    defer_tools: str = "never"


class Session:
    """One conversation of an :class:`Engine`, bound to one model. Made by :meth:`Engine.session`; bound
    on first use (``async with``, the first :meth:`run` or :meth:`begin`); ``await close()`` when done."""

    def __init__(self, engine: Engine, store: LedgerStore | None, name: str, options: _Options) -> None:
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

        from vak_context.actors.local_services import InProcessServices
        from vak_context.agent.loop import TurnConfig, TurnLoop, TurnServices
        from vak_context.agent.tools import surface_for
        from vak_context.context.request.assemble import DEFAULT_IDENTITY, DEFAULT_STANCE, system_prompt
        from vak_context.context.request.toolcalls import calls_in_text
        from vak_context.engine.binding import (
            bind_model,
            in_process_assembler,
            ray_services,
            session_profile,
            summary_model,
        )

        o, store = self._options, self._store
        client: httpx.AsyncClient = o.http_client
        if client is None:
            client = self._client = httpx.AsyncClient(trust_env=False, timeout=900.0)
        bound = bind_model(o.model, client, self._stack, base_url=o.base_url, api_key=o.api_key, window=o.window)
        services: TurnServices
        if store is None:  # on Ray: the folder's actors; the profile is read through the LedgerActor
            from vak_context.actors.factory import ledger_actor
            from vak_context.actors.ledger_client import LedgerClient

            reader = LedgerClient(str(self._engine.folder), ledger_actor(self._engine.folder), coalesce=False)
            profile = await session_profile(None, bound, horizon=o.horizon, output_reserve=o.output_reserve,
                                            ledger=reader)
            # The actors build the exact counter and the packet summariser from the endpoint (a client cannot
            # travel to an actor); the ProbeActor probes it between turns.
            summary = None if o.summary_model is None else await summary_model(
                o.summary_model, client, self._stack, base_url=o.summary_base_url, fallback_window=profile.declared_window)
            services, endpoint = ray_services(self._engine.folder, self.name, bound, profile.declared_window, summary,
                                              index_at_close=self._engine.search_index == "turn-close",
                                              summaries=o.summaries)
        else:
            # Takes the session's writer lock now (SessionLocked if another writer holds it), reading the session
            # in: in a worker thread, so that a long session does not hold up the event loop.
            await asyncio.to_thread(_hold, store, self.name)
            profile = await session_profile(store, bound, horizon=o.horizon, output_reserve=o.output_reserve)
            # The counter follows the profile that receipts keep calibrating: read from the loop at each count.
            summary = None if o.summary_model is None else await summary_model(
                o.summary_model, client, self._stack, base_url=o.summary_base_url, fallback_window=profile.declared_window)
            assembler = in_process_assembler(store, self.name, bound, profile.declared_window,
                                             lambda: loop.profile.tokens_per_char.value, summary,
                                             summaries=o.summaries)
            services = InProcessServices(store, self.name, assembler=assembler,
                                         index_at_close=self._engine.search_index == "turn-close")
            endpoint = None
        # Decided on the profile just bound: one bind, whatever the tools' share of the horizon.
        registry = _registry(o.tools, o.workspace).deferring(o.defer_tools, profile.instruction_horizon.tokens,
                                                             profile.tokens_per_char.value)
        surface = surface_for(registry, *(_card_decls() if o.card_tools else ()))
        config = TurnConfig(model=bound.model, provider=bound.provider_name,
                            system=system_prompt(surface.catalogue(), identity=o.identity or DEFAULT_IDENTITY),
                            surface=surface, max_steps=o.max_steps, max_tokens=o.max_tokens, timezone=o.timezone,
                            session_key=self.name, stance=o.stance if o.stance is not None else DEFAULT_STANCE,
                            endpoint=endpoint, repeat_rule="redo" if o.repeat_rule == "redo" else "close",
                            text_calls=calls_in_text(o.calls, profile.provenance.protocol, bound.protocol))
        loop = TurnLoop(services, bound.provider, profile, config, tools=registry,
                        on_step=self._on_step if o.on_step is not None else None, on_text=o.on_text)
        return loop

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
    def window(self) -> int:
        """The bound profile's prompt budget in tokens (the horizon and the window less the output reserve)."""
        return self._bound_loop().profile.usable_window

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
        """One closed turn's card (on Ray from the EvidenceActor, awaited: it runs inside the turn's task)."""
        return Card(**await self._evidence_call("card", card_id))

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


def engine_tool_specs() -> list[dict[str, Any]]:
    """The engine's own tools (``recall``, ``find_tools``, ``session_search``, ``commitments``) as function declarations ``{name, description,
    parameters}`` (JSON Schema), for a framework that must declare every tool its model may call
    (:mod:`vak_context.adapters`): the engine answers their calls itself, inside the turn."""
    from vak_context.agent.tools import engine_tools

    return [{"name": d.name, "description": d.spec.description, "parameters": dict(d.spec.input_schema)}
            for d in engine_tools().decls()]


def _registry(tools: Any, workspace: str | os.PathLike[str] | None) -> ToolRegistry:
    from vak_context.agent.tools import ToolRegistry, workspace_tools
    from vak_context.agent.tools.registry import Tool
    from vak_context.agent.workspace import Workspace

    if isinstance(tools, ToolRegistry):
        registry = tools
    else:
        registry = ToolRegistry()
        for item in tools:
            if isinstance(item, Tool):
                registry.add(item)
            elif callable(item):
                registry.register(item)
            else:
                raise InvalidInput(f"tools: {item!r} is neither a callable nor a Tool; pass functions or a ToolRegistry")
    # The workspace tools join only when the caller names a folder for them.
    return registry.merged(*workspace_tools(Workspace(Path(workspace)))) if workspace is not None else registry


def _card_decls() -> list[Any]:
    from vak_context.context.history.cards import card_tools
    from vak_context.context.request.surface import ToolDecl

    # Listed in the catalogue, not loaded: their schemas are about 2,000 tokens a request, rarely needed.
    return [ToolDecl(spec, always_loaded=False, observes=False) for spec in card_tools()]


class _RayLink:
    """An engine's hold on Ray: the folder its actors serve, and whether this engine started the local
    cluster (then closing the engine stops it) or connected this process (then it disconnects)."""

    def __init__(self, folder: Path, started: bool, connected: bool) -> None:
        self.folder, self.started, self.connected = folder, started, connected

    @classmethod
    def join(cls, folder: Path, ray: bool | str) -> _RayLink:
        from vak_context.actors.factory import ledger_actor
        from vak_context.actors.ray_errors import map_ray_errors
        from vak_context.engine.localray import join_ray

        if not isinstance(ray, bool) and not (isinstance(ray, str) and ray.strip()):
            raise InvalidInput(f"ray={ray!r}: pass True (a local cluster on 127.0.0.1) or a cluster's address "
                               "(host:port or ray://host:port)")
        started, connected = join_ray(None if ray is True else str(ray).strip())
        link = cls(folder.resolve(), started, connected)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with map_ray_errors("the LedgerActor"):
                ledger_actor(link.folder)  # got or created now: a wrong folder or cluster says so at open
        except BaseException:
            link.release()
            raise
        return link

    def release(self) -> None:
        from vak_context.engine.localray import leave_ray

        leave_ray(started=self.started, connected=self.connected)
        self.started = self.connected = False
