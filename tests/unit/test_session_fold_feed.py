"""A follower's view fed the entries another reader read (issue 37: one read of the ledger a step): the
AssemblerActor keeps what each read brings in (``take_new``) and the PlannerActor folds it (``feed``),
reading the ledger itself only where the entries handed over do not continue what it holds."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.sessions import ledger_session
from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.session_fold import FoldedSessions, fold_unseen
from vak_context.context.planner.view import SessionView
from vak_context.events.envelope import StoredEntry
from vak_context.events.payloads import Directive


class CountingClient(LedgerClient):
    """The ledger client over a store, counting its reads of new entries (the calls a fold makes)."""

    reads = 0

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        self.reads += 1
        return super().entries(session, start, stop)


def _folded(client: LedgerClient) -> FoldedSessions[SessionView]:
    return FoldedSessions(client, SessionView.build, fold_unseen)


def test_the_follower_folds_what_it_is_handed_and_reads_only_across_a_gap(tmp_path: Path) -> None:
    store, _ = ledger_session(tmp_path / "ledger", 3)
    try:
        leader = _folded(LedgerClient(str(store.root), store))
        leader.keep_new()
        follower_client = CountingClient(str(store.root), store)
        follower = _folded(follower_client)
        leader.get("s")
        assert leader.take_new("s") is None  # built from the chain: a follower reads for itself
        follower.get("s")
        reads = follower_client.reads

        store.append("s", [Directive(text="And the fourth?")])
        view = leader.get("s")
        handed = leader.take_new("s")
        assert handed is not None and [e.kind for e in handed] == ["directive"]
        assert leader.take_new("s") == []  # taken once
        followed = follower.feed("s", handed)
        assert follower_client.reads == reads  # folded from what it was handed: no read
        assert followed.index.head == view.index.head and len(followed.index.turns) == 4

        store.append("s", [Directive(text="A fifth, unseen by the leader")])
        store.append("s", [Directive(text="And a sixth")])
        leader.get("s")
        gap = [e for e in leader.take_new("s") or [] if e.kind == "directive"][1:]  # the fifth left out
        followed = follower.feed("s", gap)
        assert follower_client.reads == reads + 1  # a gap: read, not folded past it
        assert len(followed.index.turns) == 6
    finally:
        store.close()


def test_an_append_hands_back_what_the_view_folds_and_keeps_for_its_follower(tmp_path: Path) -> None:
    """The Ray step's path (``RayServices``): the driver's append hands back the entries from where the
    assembler's view ends (``append_since``), the view is fed them without a read, and keeps them for the
    planner it hands them to."""
    store, _ = ledger_session(tmp_path / "ledger", 3)
    try:
        client = CountingClient(str(store.root), store)
        view = _folded(client)
        view.keep_new()
        assert view.seen("s") is None  # not built yet
        view.get("s")
        assert view.take_new("s") is None  # built from the chain: a follower reads for itself
        seen = view.seen("s")
        assert seen == len(store.entries("s"))

        store.append("s", [Directive(text="Another writer's, between turns")])
        ids, handed = client.append_since("s", [Directive(text="And the fourth?")], seen)
        assert [e.seq for e in handed] == [seen, seen + 1] and handed[-1].id == ids[0]
        reads = client.reads
        fed = view.feed("s", handed)
        assert client.reads == reads  # folded from what the append handed back: no read
        assert len(fed.index.turns) == 5 and fed.index.head == ids[0]
        assert view.seen("s") == seen + 2
        assert view.take_new("s") == handed  # the planner is handed them in turn
    finally:
        store.close()


async def test_a_held_turns_directive_is_written_behind_and_synced_by_the_next_commit(tmp_path: Path) -> None:
    """``append_since(behind=True)`` (a held turn's directive on Ray): readable and handed back at once, not
    synced (no fsync of its own); the session's next durable commit (the step's pass) syncs it with its own."""
    from vak_context.events.envelope import At, Mapper, chained

    store, _ = ledger_session(tmp_path / "ledger", 2)
    try:
        client = LedgerClient(str(store.root), store)
        seen = len(store.entries("s"))
        commits = store.commits("s")
        ids, handed = await client.append_since_async("s", [Directive(text="And the third?")], seen, behind=True)
        assert [e.id for e in handed] == ids and store.head("s") == ids[0]
        assert store.written_behind("s") and store.commits("s") == commits  # written, no fsync of its own
        step = chained(At(ids[0], seen + 1, 1), "s", [Mapper().encode_payload(Directive(text="pass"))])
        await client.append_chain_async("s", step)  # the pass's durable commit
        assert not store.written_behind("s") and store.commits("s") == commits + 1  # one fsync for both
        # without ``behind`` an append is durable as ever
        await client.append_since_async("s", [Directive(text="And the fourth?")], seen)
        assert not store.written_behind("s") and store.commits("s") == commits + 2
    finally:
        store.close()
