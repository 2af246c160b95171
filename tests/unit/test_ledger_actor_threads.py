"""The LedgerActor's appends as a threaded actor: ``LedgerStore.append_many`` commits a call's group
in the calling thread (leader/follower), with no committer thread in between (issue 14)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from vak_context.errors import UnknownKind
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore


def test_followers_queued_behind_a_commit_share_the_next_one(ledger_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one call's commit is held inside its fsync, six more calls from six threads queue behind
    it; once it returns, one of them writes all six groups' appends as one commit (two commits in all),
    each call gets its own ids, and the ids chain in order of the seq each was given."""
    store = LedgerStore(ledger_dir)
    store.append_many("s", [([Nudge(tag="t", text="first")], None)])  # the session and its tail exist
    commits_before = store.commits("s")
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def held_fsync(fd: int) -> None:
        if not in_fsync.is_set():
            in_fsync.set()
            assert release.wait(60)
        real_fsync(fd)

    arrived, all_arrived = [0], threading.Event()
    lead_or_follow = store._lead_or_follow

    def counted(*args: Any) -> Any:  # called with the session lock held, before a call waits or leads
        arrived[0] += 1
        if arrived[0] == 7:
            all_arrived.set()
        return lead_or_follow(*args)

    monkeypatch.setattr(os, "fsync", held_fsync)
    monkeypatch.setattr(store, "_lead_or_follow", counted)
    results: dict[int, Any] = {}

    def call(k: int) -> None:
        results[k] = store.append_many("s", [([Nudge(tag="t", text=f"{k}.{j}")], None) for j in range(2)])

    leader = threading.Thread(target=call, args=(0,))
    leader.start()
    assert in_fsync.wait(60)
    followers = [threading.Thread(target=call, args=(k,)) for k in range(1, 7)]
    for t in followers:
        t.start()
    assert all_arrived.wait(60)
    release.set()
    for t in [leader, *followers]:
        t.join(60)
    assert store.commits("s") - commits_before == 2
    ids = [i for k in range(7) for r in results[k] for i in r]
    assert all(len(r) == 1 for k in range(7) for r in results[k]) and len(set(ids)) == 14
    chain = [e.id for e in store.entries("s")][1:]
    assert sorted(ids, key=chain.index) == chain and set(chain) == set(ids)
    assert store.verify().ok
    store.close()


def test_a_bad_request_fails_alone(ledger_dir: Path) -> None:
    """In one ``append_many`` call a request with an unknown kind gets its own error; the requests
    before and after it are written, one after the other in the chain."""
    pair = Mapper().encode_payload(Nudge(tag="t", text="ok"))
    with LedgerStore(ledger_dir) as store:
        first, bad, last = store.append_many("s", [([pair], None), ([("no_such_kind", b"{}")], None), ([pair], None)])
        assert isinstance(bad, UnknownKind)
        assert isinstance(first, list) and isinstance(last, list)
        assert [e.id for e in store.entries("s")] == first + last
        assert store.entries("s")[1].parent == first[0]




def test_one_call_of_many_runs_is_one_writer_and_the_next_lone_append_commits_itself(ledger_dir: Path) -> None:
    """A call carrying several runs (a chained step's commit: a run per blob) is one writer: the next lone
    append, durable or held, commits in its own thread, with no committer thread to wait for (counted as
    several writers, the next append waited for writers that never came, ``COMMIT_GATHER_S``). Who counts as a
    writer is the point, not how fast this disk syncs: the adaptive rule (a writer commits its own durable group
    only while a sync takes under ``INLINE_MAX_WRITE_S``, 0.2 ms, about what one takes on some machines here) is
    set aside."""
    store = LedgerStore(ledger_dir)
    store.inline_commits = True
    try:
        store.append_many("s", [([Nudge(tag="t", text=f"run {k}")], None) for k in range(4)])
        s = store._sessions["s"]
        assert s.peak_inflight < 2
        store.append("s", [Nudge(tag="t", text="alone")])
        store.hold("s")
        store.append("s", [Nudge(tag="t", text="held")])
        store.release("s", sync=False)
        assert s.committer is None  # every commit written by its caller
        # two calls at once are two writers still
        barrier = threading.Barrier(2)

        def call(k: int) -> None:
            barrier.wait()
            store.append_many("s", [([Nudge(tag="t", text=f"{k}.{j}")], None) for j in range(3)])

        threads = [threading.Thread(target=call, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.verify("s").ok and len(store.entries("s")) == 12
    finally:
        store.close()


def test_a_chain_appended_behind_returns_before_its_fsync_which_follows_on_the_sync_thread(ledger_dir: Path) -> None:
    """``LedgerActor.append_chain(behind=True)`` (a held turn's step on Ray): the entries are written and the
    call returns with the fsync still to come; the actor's sync thread makes them durable (one fsync) beside
    the step's model call. Without ``behind`` the call returns durable, as ever."""
    from vak_context.actors.ledger.actor import LedgerActor
    from vak_context.events.envelope import At, chained

    actor = LedgerActor(str(ledger_dir))
    try:
        store = actor.store
        store.append("s", [Nudge(tag="t", text="first")])
        gate, started = threading.Event(), threading.Event()

        def blocked() -> None:  # the sync thread busy: the behind commit's fsync waits behind this
            started.set()
            assert gate.wait(60)

        actor._syncs.submit(blocked)
        assert started.wait(60)
        commits = store.commits("s")
        head = store.entries("s")[-1]
        entries = chained(At(head.id, head.seq + 1, 1), "s", [Mapper().encode_payload(Nudge(tag="t", text="step"))])
        answers = actor.append_chain("s", [([Nudge(tag="t", text="step")], [None], At(head.id, head.seq + 1, 1))],
                                     behind=True)
        assert answers == [[entries[0].id]] and store.head("s") == entries[0].id
        assert store.written_behind("s") and store.commits("s") == commits  # written, the fsync still to come
        gate.set()
        actor.synced()
        assert not store.written_behind("s") and store.commits("s") == commits + 1
        actor.append_chain("s", [([Nudge(tag="t", text="durable")], [None], At(entries[0].id, head.seq + 2, 2))])
        assert not store.written_behind("s") and store.commits("s") == commits + 2 and store.verify("s").ok
    finally:
        actor.close()


def test_a_durable_call_sharing_a_group_with_a_written_behind_one_is_synced(ledger_dir: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_many(behind=True)`` skips the fsync for its own appends only: queued behind a commit in its
    fsync, a behind call and a durable call join one group, and that group is synced (the durable call's
    acknowledgement means fsynced). Alone, a behind call's commit has no fsync, and the session is not held."""
    store = LedgerStore(ledger_dir)
    try:
        store.append_many("s", [([Nudge(tag="t", text="first")], None)])
        synced: list[int] = []
        real_fsync = os.fsync

        def counting(fd: int) -> None:
            synced.append(fd)
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", counting)
        store.append_many("s", [([Nudge(tag="t", text="behind")], None)], behind=True)
        assert not synced and store.written_behind("s") and store._sessions["s"].hold == 0
        in_fsync, release = threading.Event(), threading.Event()

        def held(fd: int) -> None:
            synced.append(fd)
            if not in_fsync.is_set():
                in_fsync.set()
                assert release.wait(60)
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", held)
        arrived, both = [0], threading.Event()
        lead_or_follow = store._lead_or_follow

        def counted(*args: Any) -> Any:
            arrived[0] += 1
            if arrived[0] == 3:
                both.set()
            return lead_or_follow(*args)

        monkeypatch.setattr(store, "_lead_or_follow", counted)
        leader = threading.Thread(target=store.append_many, args=("s", [([Nudge(tag="t", text="lead")], None)]))
        leader.start()
        assert in_fsync.wait(60)
        synced.clear()
        calls = [threading.Thread(target=store.append_many, args=("s", [([Nudge(tag="t", text=t)], None)]),
                                  kwargs={"behind": b}) for t, b in (("behind 2", True), ("durable", False))]
        for t in calls:
            t.start()
        assert both.wait(60)
        release.set()
        for t in [leader, *calls]:
            t.join(60)
        assert len(synced) == 1 and not store.written_behind("s")  # the shared group was synced
        assert store.verify("s").ok and len(store.entries("s")) == 5
    finally:
        store.close()
