"""A short, human-readable account of a session: its turns, their cards and their evidence digests.

``summarize_session(store, session)`` is what the main job prints after it writes a session. It
reads the chain from the ledger (a read-only store is enough), builds the TurnIndex, and for each
turn shows its card (the stored TurnCard, or one built now for a turn not closed yet) and a few
lines of each evidence digest with its ``[evidence:…]`` tag. For people, not models: a digest is
shortened here to its first lines, and the tag says how to get the rest.
"""

from __future__ import annotations

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.history.render import SHORT_ID, EvidenceInfo, evidence_info, turn_focus
from vak_context.context.history.turncard import build_card, render_card
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.events.payloads import EvidenceBody
from vak_context.storage.ledger import LedgerStore

DIGEST_LINES = 3


def evidence_infos(store: LedgerStore, turn: Turn) -> dict[str, EvidenceInfo]:
    calls = {ex.tool_use_id: ex.input for ex in turn.exchanges}
    out = {}
    for eid in turn.evidence:
        entry = store.get(eid)
        meta = store.mapper.payload_of(entry)
        if isinstance(meta, EvidenceBody):
            out[eid] = evidence_info(eid, meta, entry.blob or b"", calls.get(meta.tool_use_id),
                                     focus=turn_focus(turn))
    return out


def _short(digest: str, lines: int = DIGEST_LINES) -> str:
    body = digest.splitlines()
    tag = body[-1] if body else ""
    head = [line for line in body[:-1] if line.strip()][:lines]
    more = len([line for line in body[:-1] if line.strip()]) - len(head)
    return "\n".join([*head, *([f"… {more} more digest lines"] if more > 0 else []), tag])


def summarize_session(
    store: LedgerStore,
    session: str,
    *,
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
    max_turns: int | None = None,
    digests_per_turn: int = 3,
) -> str:
    """The session's turns, cards and (short) digests, newest turns last."""
    head = store.head(session)
    if head is None:
        return f"session {session}: empty"
    index = TurnIndex.build(store.chain_to_root(head), tokens_per_char, mapper=store.mapper)
    turns = index.turns if max_turns is None else index.turns[-max_turns:]
    packets = ", ".join(f"turns {s.first_ordinal}-{s.last_ordinal}" for s in index.summaries) or "none"
    lines = [
        f"session {session}: {len(index.turns)} turns, {index.count} entries, "
        f"{len(index.evidence)} evidence bodies, {len(index.controls)} control messages, packets: {packets}"
        + (f", reset after turn {sum(t.behind_reset for t in index.turns)}" if index.resets else "")
    ]
    if len(turns) < len(index.turns):
        lines.append(f"(showing the last {len(turns)} turns)")
    for turn in turns:
        infos = evidence_infos(store, turn)
        card = turn.card if turn.card is not None else build_card(index, turn, infos)
        state = "card" if turn.card is not None else "open, card built now"
        lines.append("")
        lines.append(f"── turn {turn.ordinal} · {turn.tokens} tokens ({turn.tokens_source}) · {state}")
        lines.append(render_card(card, turn.ordinal))
        for eid in turn.evidence[:digests_per_turn]:
            if eid in infos:
                lines.append(f"  digest {eid[:SHORT_ID]} ({infos[eid].shape}):")
                lines.extend("    " + line for line in _short(infos[eid].digest).splitlines())
        if len(turn.evidence) > digests_per_turn:
            lines.append(f"  … {len(turn.evidence) - digests_per_turn} more evidence bodies")
    return "\n".join(lines)
