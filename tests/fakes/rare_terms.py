"""Issue 25's done-when: rare terms picked mechanically from a session, and the check that a hit's recall
returns the exact text (the session index's tests and ``session_search``'s share them)."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from tests.fakes.imported import Imported
from vak_context.bm25 import terms
from vak_context.context.evidence.bodytext import body_text
from vak_context.context.evidence.digest import parse_recall_args, select
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import Hit

SHOWN_KINDS = ("turn_card", "compaction", "reset_handoff")  # what a request shows of turns it does not carry


def rare_terms(store: LedgerStore, session: str, n: int = 10) -> list[tuple[str, str]]:
    """(term, evidence id): terms of tool results in the first quarter of the turns, in no card, packet
    or reset handoff, with idf in the top decile of the session's terms; picked evenly from the sorted
    candidates."""
    entries = store.entries(session)
    turns = sum(e.kind == "directive" for e in entries)
    quarter = max(turns // 4, 1)
    df: Counter[str] = Counter()
    first: dict[str, str] = {}
    shown: set[str] = set()
    turn = 0
    for e in entries:
        if e.kind == "directive":
            turn += 1
        if e.kind in SHOWN_KINDS:
            shown.update(terms(e.payload.decode()))
        if e.kind != "evidence_body" or not e.blob:
            continue
        meta = store.payload(e.id)
        if meta.encoding != "utf-8" or meta.tool_name in ("recall", "session_search"):
            continue
        words = set(terms(body_text(e.blob, "utf-8")))
        df.update(words)
        if 1 <= turn <= quarter:
            for w in words:
                first.setdefault(w, e.id)
    if not df:
        return []
    docs = sum(1 for e in entries if e.kind == "evidence_body")
    idf = {t: math.log(1 + (docs - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    cut = sorted(idf.values(), reverse=True)[max(len(idf) // 10 - 1, 0)]
    cands = sorted(t for t in first if t not in shown and idf[t] >= cut and not t.isdigit() and len(t) > 3)
    step = max(len(cands) // n, 1)
    return [(t, first[t]) for t in cands[::step][:n]]


def exact_text(store: LedgerStore, evidence_id: str, args: dict[str, Any]) -> str | None:
    """The exact text ``recall(args)`` names of evidence ``evidence_id`` (None: the call does not name it)."""
    request = parse_recall_args(args)
    if hasattr(request, "message") or not request.id or not evidence_id.startswith(request.id):  # type: ignore[union-attr]
        return None
    body = body_text(store.get(evidence_id).blob or b"", "utf-8")
    text = select(body, evidence_id, request.range)  # type: ignore[union-attr]
    return text if isinstance(text, str) and text in body else None


def recalls_exact(store: LedgerStore, hit: Hit, term: str) -> bool:
    text = exact_text(store, hit.ref, json.loads(hit.recall[len("recall("):-1]))
    return text is not None and term in terms(text)


def recorded_sessions(imported: Imported) -> list[str]:
    """The longest session of each recording."""
    return [max(imported.sessions(key), key=imported.store.count) for key in imported.reports]
