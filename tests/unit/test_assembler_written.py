"""The AssemblerActor commits what a turn's driver chained on the head its last pass handed back (``written``,
``Assembled.tip``): folded into the step's request, written in the step's one commit, and never written where
the session moved on (issue 37 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.evidence import evidence_body, tool_result
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.messages import ToolSpec
from vak_context.errors import ChainMoved
from vak_context.events.envelope import At, Mapper, StoredEntry, chained
from vak_context.events.payloads import AssistantStep, Directive, Nudge, ToolUseBlock
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
STEP = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Search."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)
ENCODE = Mapper().encode_payload


def _a_tool_step(tip: tuple[str | None, int], session: str) -> list[StoredEntry]:
    """An assistant step calling grep and its result (body, then the tool_result naming it), as the Ray driver
    chains them on ``tip``."""
    at = At(tip[0], tip[1], 1_700_000_000_000_000)
    step = chained(at, session, [ENCODE(AssistantStep(blocks=(ToolUseBlock(id="c1", name="grep",
                                                                              input={"pattern": "beta"}),)))])
    meta, blob, text = evidence_body("c1", "grep", "notes.md:2: beta lives here")
    body = chained(At(step[-1].id, step[-1].seq + 1, at.time_us), session, [ENCODE(meta)], [blob])
    result = chained(At(body[-1].id, body[-1].seq + 1, at.time_us), session,
                     [ENCODE(tool_result(meta, text, body[0].id))])
    return [*step, *body, *result]


async def test_what_the_driver_chained_is_folded_and_committed_in_the_pass(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="where is beta?")])
        assembler = AssemblerActor(str(store.root), store)
        first = await assembler.assemble("s", PROFILE, STEP)
        assert first.tip == (store.head("s"), store.count("s")) and first.plan_id == store.head("s")
        written = _a_tool_step(first.tip, "s")
        commits = store.commits("s")
        second = await assembler.assemble("s", PROFILE, STEP, written=written)
        assert store.entries("s", written[0].seq) == written and store.commits("s") == commits + 1
        assert second.tip == (written[-1].id, written[-1].seq + 1) and not second.replanned
        assert "beta lives here" in str(second.request.messages[-1])  # the view folded them: the request carries it
        assert store.verify().ok


async def test_a_chain_on_a_session_that_moved_on_is_not_written(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="where is beta?")])
        assembler = AssemblerActor(str(store.root), store)
        first = await assembler.assemble("s", PROFILE, STEP)
        assert first.tip is not None
        store.append("s", [Nudge(tag="t", text="another writer")])  # the head moves after the pass
        count = store.count("s")
        with pytest.raises(ChainMoved):
            await assembler.assemble("s", PROFILE, STEP, written=_a_tool_step(first.tip, "s"))
        assert store.count("s") == count
        third = await assembler.assemble("s", PROFILE, STEP)  # the view forgot them: read again
        assert "beta lives here" not in str(third.request.messages) and store.verify().ok


class _ElsewherePlanner:
    """A PlannerActor the assembler reaches as it reaches one on Ray (its own view, not shared), and, after it
    answers, another writer's append reaching the head first (the assembler's commit then moves)."""

    def __init__(self, store: LedgerStore, moves: int) -> None:
        from vak_context.actors.planner import PlannerActor

        self.inner, self.store, self.moves, self.forgot = PlannerActor(str(store.root), store), store, moves, 0

    async def plan_step(self, *args: object, **kwargs: object) -> object:
        planned = await self.inner.plan_step(*args, **kwargs)  # type: ignore[arg-type]
        if self.moves:
            self.moves -= 1
            self.store.append("s", [Nudge(tag="t", text="another writer")])
        return planned

    def forget(self, session: str) -> None:
        self.forgot += 1
        self.inner.forget(session)


async def test_a_reset_the_planner_chained_is_never_written_where_the_commit_moved(tmp_path: Path) -> None:
    """The PlannerActor chains a rescue's reset on the head it was handed; the assembler commits it with the
    plan entry. Where that commit finds the session moved on, neither is written, both views are dropped, and
    the next pass plans on what the ledger holds: one reset, the chain whole."""
    from tests.fakes.sessions import ledger_session

    dead = CapacityProfile(ProfileKey("local", "dead"), 8_192, Horizon(0, 0.9, 0.0), Ewma(0.25, 5), 256)
    store, _ = ledger_session(tmp_path / "ledger", 6)
    with store:
        store.append("s", [Directive(text="and now?")])
        planner = _ElsewherePlanner(store, moves=1)
        assembler = AssemblerActor(str(store.root), store, planner=planner)
        with pytest.raises(ChainMoved):
            await assembler.assemble("s", dead, STEP)
        kinds = [e.kind for e in store.entries("s")]
        assert "reset_handoff" not in kinds and planner.forgot == 1
        done = await assembler.assemble("s", dead, STEP)
        kinds = [e.kind for e in store.entries("s")]
        assert kinds.count("reset_handoff") == 1 and kinds[-1] == "plan" and done.written
        assert store.verify().ok


async def test_a_held_pass_hands_its_plan_back_unwritten_and_the_next_commits_it_first(tmp_path: Path) -> None:
    """A held turn's driver on Ray (``behind``): the pass sends its commit of what the driver chained as it begins,
    so it lands beside the plan and the projection, and hands back the plan entry chained, not written
    (``Assembled.unwritten``), for the next pass to commit first. The requests are those of passes that commit
    as they go, and the ledger ends the same: the plan entry where it would be, the chain whole."""
    requests = []
    for behind, folder in ((False, "plain"), (True, "held")):
        with LedgerStore(tmp_path / folder) as store:
            store.append("s", [Directive(text="where is beta?")])
            assembler = AssemblerActor(str(store.root), store)
            count = store.count("s")
            first = await assembler.assemble("s", PROFILE, STEP, behind=behind)
            assert first.plan_id is not None and first.tip is not None
            if behind:  # chained on the head, folded, not written
                assert store.count("s") == count and [e.id for e in first.unwritten] == [first.plan_id]
                assert first.tip == (first.plan_id, count + 1) and first.unwritten[0].kind == "plan"
            else:
                assert first.unwritten == () and store.head("s") == first.plan_id
            written = [*first.unwritten, *_a_tool_step(first.tip, "s")]
            commits = store.commits("s")
            second = await assembler.assemble("s", PROFILE, STEP, written=written, behind=behind)
            assert store.entries("s", count) == [*([] if behind else [store.get(first.plan_id)]), *written]
            assert store.commits("s") == commits + 1 and second.unwritten == () and not second.replanned
            assert second.tip == (written[-1].id, written[-1].seq + 1) and store.verify().ok
            # A fresh assembler (a restarted actor) reads the plan entry back: the same request.
            again = await AssemblerActor(str(store.root), store).assemble("s", PROFILE, STEP)
            assert again.request.messages == second.request.messages and not again.replanned
            requests.append((first.request, second.request))
    assert requests[0] == requests[1]


async def test_a_held_pass_whose_commit_finds_the_session_moved_raises_and_reads_again(tmp_path: Path) -> None:
    """The commit sent as the pass began fails (another writer reached the head since the pass before): the
    pass raises its ``ChainMoved``, nothing the driver chained is written, and the view (holding them
    folded, and the plan entry handed back) reads the ledger again."""
    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="where is beta?")])
        assembler = AssemblerActor(str(store.root), store)
        first = await assembler.assemble("s", PROFILE, STEP, behind=True)
        assert first.tip is not None and first.unwritten
        store.append("s", [Nudge(tag="t", text="another writer")])
        count = store.count("s")
        with pytest.raises(ChainMoved):
            await assembler.assemble("s", PROFILE, STEP, written=[*first.unwritten, *_a_tool_step(first.tip, "s")],
                                     behind=True)
        assert store.count("s") == count and first.plan_id not in [e.id for e in store.entries("s")]
        third = await assembler.assemble("s", PROFILE, STEP)
        assert "beta lives here" not in str(third.request.messages) and third.replanned and store.verify().ok


async def test_an_assembler_restarted_mid_turn_takes_the_plan_entry_handed_back_unwritten(tmp_path: Path) -> None:
    """The assembler that planned the turn's first step is gone (an actor restarted) before the next pass, which
    carries that plan entry, unwritten, first: the new one finds the turn's frozen plan in what it is handed (its
    commit still landing), so it keeps the plan and sends what the old one would have."""
    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="where is beta?")])
        first = await AssemblerActor(str(store.root), store).assemble("s", PROFILE, STEP, behind=True)
        assert first.tip is not None and first.unwritten
        written = [*first.unwritten, *_a_tool_step(first.tip, "s")]
        again = await AssemblerActor(str(store.root), store).assemble("s", PROFILE, STEP, written=written,
                                                                     behind=True)
        assert not again.replanned and again.plan_digest == first.plan_digest
        assert store.entries("s", written[0].seq) == written and store.verify().ok
