"""A follower's view fed the entries another reader read (issue 37: one read of the ledger a step): the
AssemblerActor keeps what each read brings in (``take_new``) and the PlannerActor folds it (``feed``),
reading the ledger itself only where the entries handed over do not continue what it holds."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.sessions import ledger_session
from vak_context.actors.ledger_client import LedgerClient
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
