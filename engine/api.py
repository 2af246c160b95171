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

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vak_context.engine.caller import Action, Call, ModelRequest, Turn
from vak_context.engine.results import Card, Stated, Step, TurnResult
from vak_context.engine.session import CALLS as CALLS  # the session's choices, importable here as before
from vak_context.engine.session import DEFER_TOOLS as DEFER_TOOLS
from vak_context.engine.session import REPEAT_RULES as REPEAT_RULES
from vak_context.engine.session import SUMMARIES as SUMMARIES
from vak_context.engine.session import Session, check_choices
from vak_context.engine.session import pin_stated as pin_stated
from vak_context.engine.session_loop import SessionOptions
from vak_context.errors import InvalidInput, LedgerClosed

if TYPE_CHECKING:
    import httpx

    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.agent.tools.registry import Tool, ToolRegistry
    from vak_context.storage.ledger import LedgerStore

__all__ = ["Action", "Call", "Card", "Engine", "ModelRequest", "Session", "Stated", "Step", "Turn", "TurnResult"]

# A turn's limits when the embedder sets none: model calls per turn, and tokens per completion.
DEFAULT_MAX_STEPS = 8
DEFAULT_MAX_TOKENS = 512
# Session's choices (repeat_rule=, calls=, summaries=, defer_tools=, stated_pass=) live beside it: engine/session.py.
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
        from vak_context.actors.ledger.client import LedgerClient

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
                summaries: str = "on", defer_tools: str = "never", stated_pass: str = "deterministic") -> Session:
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
        ``rules``: what the turn rules may do: ``"enforce"``, ``"observe"`` (only recorded in the ledger) or
        ``"off"``, with per-rule overrides (``"observe,freshness-check=enforce"`` or a mapping); unset,
        ``enforce`` in :meth:`Session.run` (the engine is the agent), ``observe`` in :meth:`Session.begin`
        (docs/DRIFT.md). ``calls``: ``"text"`` (the model writes its calls in its reply, parsed from it) or
        ``"native"`` (the provider's tool calls only); unset, what a probe measured, else the bundled model's
        own, else ``"native"``. ``summaries``: ``"on"`` (a model writes each packet's summary once, when the
        packet is formed) or ``"off"`` (the engine's extract instead; docs/PLANNER.md "Packets").
        ``defer_tools``: ``"auto"`` puts ``tools`` behind ``find_tools`` when their schemas exceed a quarter
        of the profile's horizon, ``"always"``, or ``"never"`` (the default). ``stated_pass``:
        ``"deterministic"`` (the default: the engine's patterns read each closed turn's directive) or
        ``"model"`` (also the summariser's model, one call at each turn's close; docs/STATE.md).
        """
        check_choices(rules=rules, calls=calls, summaries=summaries, defer_tools=defer_tools, repeat_rule=repeat_rule,
                      stated_pass=stated_pass)
        store = self._live_store()
        if name in self._sessions:
            raise InvalidInput(f"session {name!r} is already open in this engine; use that Session, or close it first")
        options = SessionOptions(
            model=model, tools=tools, workspace=workspace, stance=stance, identity=identity, window=window,
            horizon=horizon, output_reserve=output_reserve, base_url=base_url, api_key=api_key,
            http_client=http_client, on_step=on_step, on_text=on_text, card_tools=card_tools,
            summary_model=summary_model, summary_base_url=summary_base_url, max_steps=max_steps,
            max_tokens=max_tokens, timezone=timezone, repeat_rule=repeat_rule, rules=rules, calls=calls,
            summaries=summaries == "on", defer_tools=defer_tools, stated_pass=stated_pass == "model")
        self._sessions[name] = session = Session(self, store, name, options)
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
        LedgerActor's process, which marks its own calls on a turn's path (appends, reads of entries)."""
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


def _check_search_index(value: str) -> None:
    if value not in SEARCH_INDEX:
        raise InvalidInput(f"search_index must be one of {', '.join(map(repr, SEARCH_INDEX))} (got {value!r})")


def engine_tool_specs() -> list[dict[str, Any]]:
    """The engine's own tools (``recall``, ``find_tools``, ``session_search``, ``commitments``) as function declarations ``{name, description,
    parameters}`` (JSON Schema), for a framework that must declare every tool its model may call
    (:mod:`vak_context.adapters`): the engine answers their calls itself, inside the turn."""
    from vak_context.agent.tools import engine_tools

    return [{"name": d.name, "description": d.spec.description, "parameters": dict(d.spec.input_schema)}
            for d in engine_tools().decls()]


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
