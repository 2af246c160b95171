"""The session's search index caught up in the background when a turn closes (issue 25 item 1,
``storage/catchup.py``): after a turn of the engine's loop and of the caller's loop the index's state names
the turn's last entry, and a search then indexes nothing; catch-ups coalesce per session; closing right after
a turn is clean; a stopped catch-up commits what it took; a failed one is logged and the next search rebuilds;
read-only stores, ``search=True`` stores and ``search_index="search"`` never catch up at a turn's close.
On Ray: tests/ray/test_session_search_ray.py."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.tool_turns import PROFILE, completion
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.tools import ToolRegistry, surface_for
from vak_context.context.request.assemble import system_prompt
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Directive, EvidenceBody
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.catchup import index_lock
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import (
    SEARCH_DIR,
    WriterIndex,
    index_findings,
    open_dir,
    read_state,
    search_path,
    write_state,
)
from vak_context.storage.sessionsearch import search_sessions

LOG = "".join(f"row {i} filler words here\n" for i in range(1, 201)).replace("row 120 ", "row 120 quokka ")


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True, observes=True)
    def fetch_log(name: str) -> str:
        """Fetch a service's log."""
        return LOG

    return registry


def _replies(*bodies: dict[str, Any]) -> httpx.MockTransport:
    queue = list(bodies)

    def handle(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": "no tokenizer here"})
        return httpx.Response(200, json=queue.pop(0))

    return httpx.MockTransport(handle)


def _loop(store: LedgerStore, client: httpx.AsyncClient, session: str = "s1", **services: Any) -> TurnLoop:
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    registry = _registry()
    surface = surface_for(registry)
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=4, max_tokens=64)
    return TurnLoop(InProcessServices(store, session, **services), provider, PROFILE, config, tools=registry,
                    clock=lambda: 1_764_504_000.0)


def _state(root: Path, session: str) -> dict[str, Any] | None:
    return read_state(search_path(root, session))


def _last(store: Any, session: str) -> tuple[int, str]:
    last = store.entries(session)[-1]
    return last.seq, last.id


async def test_after_a_turn_of_the_engines_loop_the_index_reaches_its_last_entry_and_a_search_adds_nothing(
        tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    async with httpx.AsyncClient(transport=_replies(
            completion(calls=[("fetch_log", {"name": "billing"})]), completion("The log is long."),
            completion("Noted."))) as client:
        with LedgerStore(root) as store:
            loop = _loop(store, client)
            await loop.run("fetch the billing log")
            store.index_idle()
            state = _state(root, "s1")
            assert state is not None and (state["seq"], state["id"]) == _last(store, "s1")
            assert store.catch_up is not None and store.catch_up.runs == 1 and not store.catch_up.errors
            found = search_sessions(store, "s1", "quokka")
            assert _state(root, "s1") == state  # the search indexed nothing: same seq, same document count
            assert [h.start for h in found.hits] == [91]
            await loop.run("anything else?")  # the next turn's catch-up takes only its own entries
            store.index_idle()
            after = _state(root, "s1")
            assert after is not None and (after["seq"], after["id"]) == _last(store, "s1")
            assert after["docs"] == state["docs"] + 2  # its directive and its card
            assert store.catch_up.runs == 2
        with LedgerStore(root, readonly=True) as reader:
            assert index_findings(reader, "s1") is None


async def test_after_a_turn_of_the_callers_loop_the_index_reaches_its_last_entry(tmp_path: Path) -> None:
    transport = _replies(completion(calls=[("fetch_log", {"name": "billing"})]), completion("The log is long."))
    root = tmp_path / "ledger"
    async with httpx.AsyncClient(transport=transport) as client:
        with vak_context.Engine.open(root) as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      window=8_000, http_client=client, tools=_registry()) as session:
                async with session.begin("fetch the billing log") as turn:
                    while (request := await turn.request()) is not None:
                        response = await client.post(request.url, json=request.body)
                        action = await turn.reply(response.json(), status=response.status_code)
                        for call in action.calls:
                            await turn.tool_result(call.id, LOG)
                assert turn.result.outcome == "completed"
                engine.index_idle()
                ledger = engine.ledger()
                state = _state(root, "s")
                assert state is not None and (state["seq"], state["id"]) == _last(ledger, "s")
                found = await ledger.session_search_async("s", "quokka")
                assert _state(root, "s") == state and [h.start for h in found.hits] == [91]


async def test_closing_the_engine_right_after_a_turn_is_clean_and_leaves_a_sound_index(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    async with httpx.AsyncClient(transport=_replies(
            completion(calls=[("fetch_log", {"name": "billing"})]), completion("The log is long."))) as client:
        engine = vak_context.Engine.open(root)
        async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                  window=8_000, http_client=client, tools=_registry()) as session:
            await session.run("fetch the billing log")
        engine.close()  # waits for (or stops) the catch-up the turn's close queued
    assert not [t for t in threading.enumerate() if t.name == "vak-search-catch-up"]
    with LedgerStore(root, readonly=True) as reader:
        assert index_findings(reader, "s") is None  # caught up whole, in part, or not yet: never torn
    with LedgerStore(root) as store:
        assert [h.start for h in search_sessions(store, "s", "quokka").hits] == [91]


def _write(store: LedgerStore, session: str, turns: int) -> None:
    for t in range(turns):
        store.append(session, [Directive(text=f"look {t}")])
        body = EvidenceBody(tool_use_id=f"t{t}", tool_name="read_file", chars=len(LOG), bytes=len(LOG))
        store.append(session, [body], blobs=[LOG.encode()])


def test_catch_ups_of_one_session_coalesce_and_one_closing_meanwhile_runs_once_more(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 2)
        lock = index_lock(root, "s")
        with lock:  # the catch-up starts and waits here, as it would behind a running search
            assert store.index_later("s")
            catch_up = store.catch_up
            assert catch_up is not None
            catch_up.wait_running("s")
            _write(store, "s", 1)
            for _ in range(3):  # three turns close while it runs: one more catch-up, not three
                assert store.index_later("s")
            assert catch_up.pending == ("s",)
        store.index_idle()
        assert catch_up.runs == 2 and catch_up.pending == () and catch_up.running is None
        state = _state(root, "s")
        assert state is not None and (state["seq"], state["id"]) == _last(store, "s")


def _documents(root: Path, session: str) -> list[tuple[str, int, str, int]]:
    ix = open_dir(search_path(root, session))
    try:
        with ix.searcher() as searcher:
            return sorted((f["key"], f["turn"], f["kind"], f["seq"]) for f in searcher.all_stored_fields())
    finally:
        ix.close()


def test_a_catch_up_goes_on_from_the_last_ones_entry_and_indexes_what_a_whole_open_does(tmp_path: Path) -> None:
    """Each turn's catch-up after the first reads only the entries after the last one's (its resume point);
    the documents, turn numbers included, are those a rebuild from every entry makes. A search in between
    (which writes the index itself) sends the next catch-up back to the whole open."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        for turns in (2, 1, 1):
            _write(store, "s", turns)
            assert store.index_later("s")
            store.index_idle()
        catch_up = store.catch_up
        assert catch_up is not None and (catch_up.runs, catch_up.resumed) == (3, 2)
        assert _state(root, "s")["seq"] == _last(store, "s")[0]  # type: ignore[index]
        search_sessions(store, "s", "quokka", limit=1)  # its own WriterIndex, whole (nothing new to add)
        _write(store, "s", 1)
        store.append("s", [Directive(text="look 5")])
        search_sessions(store, "s", "quokka", limit=1)  # moves the state past the resume point
        _write(store, "s", 1)
        assert store.index_later("s")
        store.index_idle()
        assert (catch_up.runs, catch_up.resumed) == (4, 2)
        assert store.index_later("s")  # nothing new: resumed, nothing written
        store.index_idle()
        assert (catch_up.runs, catch_up.resumed) == (5, 3)
        caught_up = _documents(root, "s")
        assert {turn for _key, turn, _kind, _seq in caught_up} == set(range(1, 8))
        shutil.rmtree(search_path(root, "s"))
        WriterIndex(store, "s").close()  # rebuilt from every entry
        assert _documents(root, "s") == caught_up


def test_a_catch_up_gives_way_to_a_request_being_worked_on(tmp_path: Path) -> None:
    """While a request's own work is marked (``Engine.foreground``: vak serve's routing and binding, the
    assembly), a catch-up waits to start; it runs once the work is done."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 2)
        with store.foreground.hold():
            assert store.index_later("s")
            catch_up = store.catch_up
            assert catch_up is not None
            store.foreground.wait_waiting(1)
            assert catch_up.runs == 0 and catch_up.running is None and catch_up.pending == ("s",)
        store.index_idle()
        assert catch_up.runs == 1
        state = _state(root, "s")
        assert state is not None and (state["seq"], state["id"]) == _last(store, "s")
        assert store.foreground.quiet(0.0, lambda: False)  # nothing held: quiet at once


def test_the_worker_ends_when_nothing_is_pending_without_waiting_for_the_requests(tmp_path: Path) -> None:
    """A catch-up that finishes while a request is being worked on leaves nothing pending: the thread ends
    there, it does not wait for the request (it once waited in the mode of those queued at open, up to
    ``SETTLE_LIMIT_S``, and held back the turns that closed meanwhile)."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 2)
        with index_lock(root, "s"):  # the catch-up starts and waits here
            assert store.index_later("s")
            catch_up = store.catch_up
            assert catch_up is not None
            catch_up.wait_running("s")
            hold = store.foreground.hold()
            hold.__enter__()  # a request's work starts while the catch-up runs
        try:
            store.index_idle()  # returns with the request still held
            assert catch_up.runs == 1 and catch_up.pending == () and store.foreground.waits == 0
        finally:
            hold.__exit__(None, None, None)
        state = _state(root, "s")
        assert state is not None and (state["seq"], state["id"]) == _last(store, "s")


def test_a_turns_close_waits_until_no_request_work_ran_for_a_moment(tmp_path: Path) -> None:
    """Steps that follow each other at once (a model that answers at once) are not slowed by a catch-up
    beside them: a turn's close is caught up once no request work has run for ``SETTLE_S``, and the
    turns that closed meanwhile coalesce into that one run."""
    from vak_context.storage.catchup import SETTLE_S

    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 1)
        with store.foreground.hold():
            assert store.index_later("s")
            catch_up = store.catch_up
            assert catch_up is not None
            store.foreground.wait_waiting(1)
            _write(store, "s", 1)
            assert store.index_later("s") and catch_up.pending == ("s",) and catch_up.runs == 0
        assert not store.foreground.quiet(0.0, lambda: False, settle=SETTLE_S * 100)  # it just ended
        store.index_idle()
        assert catch_up.runs == 1
        state = _state(root, "s")
        assert state is not None and (state["seq"], state["id"]) == _last(store, "s")


def test_a_catch_up_queued_at_open_waits_for_the_requests_to_settle_and_a_turns_close_goes_first(
        tmp_path: Path) -> None:
    """The sessions a kill left behind (queued as the store opens, ``settle``) wait until no request work has
    run for a while, not only for the work in progress: the resumed sessions' first requests come in a burst
    with gaps. A turn's close queued meanwhile is caught up first."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "old", 2)
        _write(store, "new", 2)
        with store.foreground.hold():
            assert store.index_later("old", settle=True)
            catch_up = store.catch_up
            assert catch_up is not None
            store.foreground.wait_waiting(1)
            assert store.index_later("new") and store.index_later("old")  # a turn of it closes: still settling
            assert catch_up.pending == ("old", "new") and catch_up.runs == 0
        assert not store.foreground.quiet(0.0, lambda: False, settle=60.0)  # the work ended just now
        catch_up.wait_running("new")
        store.index_idle()
        assert catch_up.runs == 2
        for session in ("old", "new"):
            state = _state(root, session)
            assert state is not None and (state["seq"], state["id"]) == _last(store, session)


def test_closing_the_store_stops_a_catch_up_that_waits_for_a_request(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    store = LedgerStore(root)
    _write(store, "s", 2)
    with store.foreground.hold():
        assert store.index_later("s")
        store.foreground.wait_waiting(1)
        store.close()  # wakes the waiting catch-up, which then sees the store stopping
    catch_up = store.catch_up
    assert catch_up is not None and catch_up.runs == 0 and catch_up.running is None
    assert _state(root, "s") is None


def test_a_stopped_catch_up_commits_what_it_took_and_the_next_open_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 4)
        asked = iter([False, False, False, True])  # stop before the fourth entry with documents
        WriterIndex(store, "s", stop=lambda: next(asked)).close()
        state = _state(root, "s")
        assert state is not None and state["seq"] == 2 and state["id"] == store.entries("s")[2].id
        assert [h.start for h in search_sessions(store, "s", "quokka", limit=10).hits] == [91] * 4
        assert _state(root, "s")["seq"] == _last(store, "s")[0]  # type: ignore[index]
    with LedgerStore(root, readonly=True) as reader:
        assert index_findings(reader, "s") is None


def test_a_failed_catch_up_is_logged_and_the_next_search_rebuilds(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 1)
        folder = root / "sessions" / "s" / SEARCH_DIR
        folder.write_text("not an index")  # whoosh cannot make its folder here
        with caplog.at_level(logging.WARNING, logger="vak.search"):
            assert store.index_later("s")
            store.index_idle()
        assert store.catch_up is not None and store.catch_up.runs == 0
        assert len(store.catch_up.errors) == 1 and "FileExistsError" in store.catch_up.errors[0]
        assert "the catch-up at a turn's close failed" in caplog.text and "rebuilds it" in caplog.text
        assert not folder.exists()  # removed, so the lazy path rebuilds at the next search
        assert [h.start for h in search_sessions(store, "s", "quokka").hits] == [91]


def test_stores_that_must_not_catch_up_at_a_turns_close_do_not(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _write(store, "s", 1)
        assert store.index_later("never-written")  # a turn that ended before it wrote: nothing to do
        store.index_idle()
        assert not (root / "sessions" / "never-written").exists()
    with LedgerStore(root, readonly=True) as reader:
        assert not reader.index_later("s") and reader.catch_up is None
    with LedgerStore(root, search=True) as indexing:  # its own indexer keeps the index current
        assert not indexing.index_later("s")
    closed = LedgerStore(root)
    closed.close()
    assert not closed.index_later("s")


async def test_search_index_search_leaves_the_index_to_the_first_search(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with pytest.raises(InvalidInput, match="search_index must be one of 'turn-close', 'search'"):
        vak_context.Engine.open(root, search_index="append")
    async with httpx.AsyncClient(transport=_replies(completion("Hello."))) as client:
        with vak_context.Engine.open(root, search_index="search") as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      window=8_000, http_client=client) as session:
                await session.run("hello")
            engine.index_idle()
            assert not search_path(root, "s").exists()


def test_opening_the_engine_catches_up_indexes_a_kill_left_torn_or_behind(tmp_path: Path) -> None:
    """A writer killed between whoosh's commit and its state file leaves more documents than the state says
    (what ``vak verify`` reported after a SIGKILL); one killed before a turn's catch-up leaves the index
    behind. ``Engine.open`` queues both (reading state files and the ledger's index only), so after the
    background catch-up ``vak verify``'s check finds nothing, with no search and no turn; a session never
    indexed stays unindexed, and ``search_index="search"`` leaves all of it to the first search."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        for session in ("torn", "behind", "current", "never"):
            _write(store, session, 2)
        for session in ("torn", "behind", "current"):
            WriterIndex(store, session).close()
        _write(store, "behind", 1)  # appended after its last catch-up: the kill came before the next
        torn = read_state(search_path(root, "torn"))
        assert torn is not None
        first_turn_end = store.entries("torn")[1].id
    # whoosh committed both turns' documents; the state the kill left names the first turn only
    write_state(search_path(root, "torn"), "torn", 1, first_turn_end, int(torn["docs"]) - 1)
    with LedgerStore(root, readonly=True) as reader:
        assert "where its state says" in (index_findings(reader, "torn") or "")
    with vak_context.Engine.open(root, search_index="search") as engine:  # the first search's to do
        engine.index_idle()
    with LedgerStore(root, readonly=True) as reader:
        assert index_findings(reader, "torn") is not None
    with vak_context.Engine.open(root) as engine:
        engine.index_idle()
        ledger = engine.ledger()
        for session in ("torn", "behind", "current"):
            state = _state(root, session)
            assert state is not None and (state["seq"], state["id"]) == _last(ledger, session), session
    assert not search_path(root, "never").exists()
    with LedgerStore(root, readonly=True) as reader:
        assert [index_findings(reader, s) for s in ("torn", "behind", "current")] == [None, None, None]
