"""Spec §10's 31-turn shape on real sessions (issue 26): every recorded session of at least 10 turns, and
generated ones, planned under the local model's 8k window.

On the recorded sessions: the median card is at most 100 tokens, every 31-turn session carries under
3,000 tokens of history, no card costs more than its turn's full record, and nothing model-visible is
cut (the no-cut checker, tests/fakes/nocut.py, on the ledger; and on the projected request, every
evidence id of a carried turn is named). The generated sessions (``vak_context.sessions.generator``:
two to three tool calls and a quoting answer every turn) are held to the same card bounds (median at
most 100 tokens, none above its record), the same no-cut checks, and the same 30-turn shape at its
cheapest: every turn carried at its cheaper form, no packet, under 3,000 tokens. Their planned history
is larger (3.7k-5.9k): an 8k budget holds more than that, and the planner spends what is left on Full
turns by value (docs/PLANNER.md, "Value and fill"); the recorded 31-turn session is under 3,000 Full
because its records are short. bench/history.py prints both.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tests.fakes.imported import TOKENS_PER_CHAR, Imported
from tests.fakes.local_model import LOCAL_MODEL_N_CTX
from tests.fakes.nocut import check_no_cut
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.render import VERBATIM_CHARS
from vak_context.context.history.turncard import short_id
from vak_context.context.planner.records import Fidelity, Plan
from vak_context.context.planner.sizes import card_text
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project
from vak_context.events.blocks import ToolResultBlock
from vak_context.events.payloads import Activity
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

LOCAL = CapacityProfile(  # the local model's 8k window, as tests/unit/test_replay_typical_shape.py plans it
    key=ProfileKey("local", "smollm2"), declared_window=LOCAL_MODEL_N_CTX,
    instruction_horizon=Horizon(LOCAL_MODEL_N_CTX, 0.9, 0.0), tokens_per_char=Ewma(TOKENS_PER_CHAR, 5),
    output_reserve=512,
)
FOLLOW_UP = "Can you go over what we settled so far, and confirm the last figure again?"


def _system(store: LedgerStore, session: str) -> str:
    for seq, eid, _parent, kind, _t in store.iter_metadata(session):
        payload = store.payload(eid) if kind == "activity" else None
        if isinstance(payload, Activity) and payload.activity == "import.system_prompt":
            return str(payload.detail["text"])
        if seq > 8:
            break
    return ""


def _planned(store: LedgerStore, session: str) -> tuple[SessionView, Plan]:
    """The session's next request planned under LOCAL, checked: no card above its record, nothing cut."""
    view = SessionView.build(store.chain_to_root(store.head(session) or ""), TOKENS_PER_CHAR)
    system = _system(store, session)
    p = view.plan(LOCAL, FOLLOW_UP, prefix_tokens=prefix_tokens(LOCAL, system), tail_tokens=20)
    request = project(view.index, p, model="m", infos=view.infos, system=system, tail="<t>now</t>")
    text = "\n".join(str(getattr(part, "text", None) or getattr(part, "content", None) or part.model_dump())
                     for m in request.messages for part in m.content)  # what the model reads, unescaped
    shown = {part.tool_use_id: part.content for m in request.messages for part in m.content
             if isinstance(part, ToolResultBlock)}
    for t in p.turns:
        turn = view.index.turn(t.ordinal)
        assert t.card_tokens <= t.full_tokens, (session, t.ordinal)  # a card never costs more than the record
        if t.fidelity == Fidelity.CARD:  # the card it sends is that size, and names every evidence id
            card = card_text(view.index, turn, view.infos)
            assert estimate_tokens(len(card), TOKENS_PER_CHAR) == t.card_tokens <= t.full_tokens
            assert card in text
        for ex in turn.exchanges:
            eid = ex.result.evidence_id if ex.result is not None else None
            if eid is None or t.fidelity in (Fidelity.PACKET, Fidelity.BEHIND_RESET):
                continue  # a packet or a reset's handoff speaks for its turns (tests/unit/test_planner_properties.py)
            if t.fidelity == Fidelity.FULL and len(ex.result.content) <= VERBATIM_CHARS:  # type: ignore[union-attr]
                assert shown[ex.tool_use_id] == ex.result.content  # type: ignore[union-attr]
            else:
                assert short_id(eid) in text, (session, t.ordinal, t.fidelity)
    results = sum(1 for t in view.index.turns for ex in t.exchanges if ex.result is not None and ex.result.evidence_id)
    assert check_no_cut(store, None, session) == results
    return view, p


def test_recorded_sessions_keep_cards_at_the_specs_size_and_31_turns_under_3k(imported: Imported) -> None:
    sessions = [s.session for r in imported.reports.values() for s in r.sessions if s.turns >= 10]
    assert len(sessions) >= 30  # the tau-bench conversations of 10 turns or more
    cards, shaped = [], []
    for session in sessions:
        _view, p = _planned(imported.store, session)
        cards += [t.card_tokens for t in p.turns]
        if len(p.turns) == 30:  # 30 closed turns and the follow-up: a 31-turn session
            shaped.append(session)
            assert p.budget.history < 3_000, (session, p.budget)
            assert p.packet is None
    assert shaped  # tau-task9-trial3
    assert statistics.median(cards) <= 100


def test_generated_sessions_keep_cards_at_the_specs_size_and_30_turns_fit_in_3k_at_their_cheapest(
    tmp_path: Path,
) -> None:
    cards = []
    with LedgerStore(tmp_path / "ledger") as store:
        for seed in (0, 1, 2):  # bench/history.py's generated sessions
            session = f"generated-{seed}"
            generate_session(seed=seed, turns=30, append=lambda p, b, s=session: store.append_one(s, p, blob=b))
            _view, p = _planned(store, session)
            assert len(p.turns) == 30 and p.packet is None  # 30 closed turns and the follow-up: a 31-turn session
            planned = [t for t in p.turns if t.fidelity != Fidelity.BEHIND_RESET]  # the generator resets after turn 1
            cheapest = sum(min(t.card_tokens, t.full_tokens) for t in planned)
            assert cheapest < 3_000, (session, cheapest)  # every turn at its cheaper form: spec §10's shape
            promoted = sum(t.full_tokens - t.card_tokens for t in planned
                           if t.fidelity == Fidelity.FULL and t.full_tokens > t.card_tokens)
            assert p.budget.history == cheapest + promoted <= p.budget.budget  # the rest is Full turns, by value
            cards += [t.card_tokens for t in p.turns]
    assert statistics.median(cards) <= 100  # tool-heavy turns' cards, bounded (was ~150 with the answer whole)
