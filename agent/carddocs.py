"""The card index's documents (spec §10), made from turn cards: the engine's index text of each card,
read from a turn or from the ledger alone (so the card index can be deleted and rebuilt).

It sits here, above both, because ``vak_context.storage.cardindex`` keeps and ranks documents without importing
the engine (``context``), and the engine does not import storage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from vak_context.context.history.turncard import index_text
from vak_context.events.payloads import Presentation, TurnCard
from vak_context.storage.cardindex import CardDoc, CardIndex, embedder_from_config, pending_sessions
from vak_context.storage.ledger import LedgerStore

log = logging.getLogger("vak.cards")


def card_doc(
    card_id: str, card: TurnCard, presentations: Mapping[str, Presentation | Mapping[str, Any]]
) -> CardDoc:
    """The index document of one turn card; ``presentations`` maps presentation ids to their entries."""
    payloads = {pid: (p.payload if isinstance(p, Presentation) else p) for pid, p in presentations.items()}
    return CardDoc(card.turn_id, card_id, index_text(card, payloads))


def docs_from_ledger(store: LedgerStore, session: str) -> list[CardDoc]:
    """Every turn's index document, read from the session's turn_card and presentation entries."""
    wanted = [
        (seq, eid, kind)
        for seq, eid, _parent, kind, _t in store.iter_metadata(session)
        if kind in ("turn_card", "presentation")
    ]
    presentations: dict[str, Presentation] = {}
    cards: dict[str, tuple[str, TurnCard]] = {}
    for _seq, eid, kind in wanted:
        payload = store.payload(eid)
        if kind == "presentation":
            presentations[eid] = payload
        elif payload.turn_id not in cards:  # written once, never rewritten: the first card stands
            cards[payload.turn_id] = (eid, payload)
    return [
        card_doc(
            cid,
            card,
            {p: presentations[p] for p in (r.id for r in card.answered.presentations) if p in presentations},
        )
        for cid, card in cards.values()
    ]


def catch_up_cards(store: LedgerStore) -> list[str]:
    """Rebuild from the ledger the card indexes a killed process left behind it (their pending marker: a
    card appended whose document was never committed), as the engine opens the folder; returns those
    sessions. Costs a directory listing when none is pending. An index another live writer holds is left
    to it (logged)."""
    sessions = pending_sessions(store.root)
    if not sessions:
        return []
    with CardIndex(store.root, embedder=embedder_from_config()) as cards:
        for session in sessions:
            try:
                turns = cards.rebuild(session, docs_from_ledger(store, session))
                log.info("card index of %s caught up from the ledger at open: %d turns", session, turns)
            except Exception as exc:  # the index is a cache: vak reindex, or the next open, rebuilds it
                log.warning("card index of %s not caught up at open (%s); run `vak reindex`", session, exc)
    return sessions


def card_index_findings(store: LedgerStore, session: str) -> str | None:
    """What ``vak verify`` reports of a session's card index (None: absent, or it agrees with the ledger).
    Read-only: the state and whoosh's files (``cardwhoosh.check``), then the turns whoosh holds against the
    turns whose cards the ledger holds."""
    from vak_context.storage import cardwhoosh
    from vak_context.storage.cardindex import CARDS_DIR

    folder = store.root / "sessions" / session / CARDS_DIR
    checked = cardwhoosh.check(folder, session)
    if checked == "no index":
        return None
    if isinstance(checked, str):
        return f"session {session!r}: the card index disagrees with the ledger: {checked}; run `vak reindex`"
    try:
        with checked.searcher() as searcher:
            have = {(f["turn"], f["card"]) for f in searcher.all_stored_fields()}
    except Exception as exc:  # a torn segment that opened
        return f"session {session!r}: the card index cannot be read ({type(exc).__name__}); run `vak reindex`"
    finally:
        checked.close()
    want = {(d.turn_id, d.card_id) for d in docs_from_ledger(store, session)}
    if have != want:
        return (f"session {session!r}: the card index holds {len(have - want)} turn(s) the ledger's cards do not "
                f"make and lacks {len(want - have)}; run `vak reindex`")
    return None
