"""EvidenceActor: stores tool results, answers recall, serves digests and windows, closes turns.

A plain class (``vak_context.actors.factory.evidence_actor`` wraps it with ``ray.remote``). Thin: each method
loads state from the ledger, calls the pure functions of ``context/`` and appends what they return.
It reads and writes through ``LedgerClient``: the folder's LedgerActor handle (its one writer), or a
LedgerStore the caller opened as the writer. The session's TurnIndex is kept current incrementally from the entries
appended since it was built; the card index (``vak_context.storage.cardindex``) gets each turn as it closes.

Recall never raises on a bad argument: the model gets a tool error that says how to call it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vak_context.actors.evidence_entries import evidence_body, stored_answer, tool_result
from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.session_fold import FoldedSessions
from vak_context.agent.carddocs import card_doc, docs_from_ledger
from vak_context.config import VakConfig
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.evidence.digest import RecallError, body_text, parse_recall_args, select, window
from vak_context.context.evidence.recall import RecallRequest
from vak_context.context.history.presentations import card_results, plan_cards
from vak_context.context.history.render import EvidenceInfo, evidence_info, record_text, render_turn
from vak_context.context.history.turncard import Outcome, build_card, render_card
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.context.stated.items import StatedItem
from vak_context.context.stated.render import stated_text
from vak_context.errors import ChainMoved, InvalidInput, UnknownSession, VakError
from vak_context.events.envelope import At, Mapper, StoredEntry, chained
from vak_context.events.payloads import EvidenceBody, ReadingKey, ToolResult, TurnCard
from vak_context.storage.cardindex import CardDoc, CardIndex, embedder_from_config
from vak_context.storage.ledger import LedgerStore

BODIES_KEPT = 64  # the evidence bodies folded lately, blobs and all, kept for the next close (``_body``)


class EvidenceActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as the folder's
    writer (``vak_context.actors.ledger.client``: there is no default, so no second writer is opened by accident). ``tokens_per_char`` is the bound model's, for turn and card sizes.
    ``config`` (default: the operator's file) says whether the card index adds embeddings."""

    def __init__(
        self,
        root: str,
        ledger: LedgerStore | Any,
        tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
        config: VakConfig | None = None,
    ) -> None:
        self.root = root
        self.ledger = LedgerClient(root, ledger)
        # The card index is a cache: it reads the ledger through ``_card_docs`` when it finds its files unusable
        self.cards = CardIndex(root, embedder=embedder_from_config(config), source=self._card_docs)
        self._cards_checked: set[str] = set()
        self._unsent = False  # a close handed the driver's entries that are not sent to the ledger yet
        self._chained_card: StoredEntry | None = None  # the card the last close chained after the driver's entries
        self.tokens_per_char = tokens_per_char
        self.mapper = Mapper()
        self._lock = threading.RLock()
        self._indexes = FoldedSessions(
            self.ledger, lambda chain: TurnIndex.build(chain, self.tokens_per_char, mapper=self.mapper),
            self._add_entries, self._lock)
        # The evidence bodies the index folded lately: a close digests the turn's bodies, which the turn's passes
        # committed and the index read, without reading each back (on Ray a ledger call apiece).
        self._bodies: dict[str, StoredEntry] = {}

    def _add_entries(self, index: TurnIndex, entries: Sequence[StoredEntry]) -> None:
        for entry in entries:
            index.add(entry)
            if entry.kind == "evidence_body" and entry.blob is not None:
                self._bodies[entry.id] = entry
                if len(self._bodies) > BODIES_KEPT:
                    del self._bodies[next(iter(self._bodies))]

    # ------------------------------------------------------------------ state

    def index(self, session: str, entries: Sequence[StoredEntry] | None = None) -> TurnIndex:
        """The session's TurnIndex, brought up to date with what was appended since last time: from ``entries``
        (the session's entries from where the index ends to the head, as the turn's driver knows them: no read)
        where they continue it, else read."""
        return self._indexes.get(session) if entries is None else self._indexes.feed(session, entries)

    def _body(self, evidence_id: str, get: Callable[[str], StoredEntry] | None = None) -> tuple[EvidenceBody, bytes]:
        entry = self._bodies.get(evidence_id) or (get or self.ledger.get)(evidence_id)
        meta = self.mapper.payload_of(entry)
        if not isinstance(meta, EvidenceBody):
            raise InvalidInput(f"{evidence_id} is a {entry.kind} entry, not an evidence body")
        return meta, entry.blob or b""

    def _resolve(self, index: TurnIndex, ident: str) -> str | RecallError:
        """A full evidence id from an id or a unique prefix of one (cards show the first 12 hex digits)."""
        if ident in index.evidence:
            return ident
        matches = [e for e in index.evidence if e.startswith(ident.lower())] if len(ident) >= 6 else []
        if len(matches) == 1:
            return matches[0]
        if matches:
            return RecallError(
                f"evidence id {ident!r} is ambiguous ({len(matches)} matches); give more of it."
            )
        return RecallError(
            f"no evidence {ident!r} in this session. Use an id from an [evidence:…] tag or a card."
        )

    def _infos(self, index: TurnIndex, turn: Turn,
               get: Callable[[str], StoredEntry] | None = None) -> dict[str, EvidenceInfo]:
        """The turn's digests: read from the process's cache (``vak_context.context.history.render.DIGESTS``)
        where a view or an earlier call computed them, so a card at close and each ``recall({"turn": N})``
        read each body's blob (a ledger read) but digest it at most once."""
        calls = {ex.tool_use_id: ex.input for ex in turn.exchanges}
        out = {}
        for eid in turn.evidence:
            meta, blob = self._body(eid, get)
            out[eid] = evidence_info(eid, meta, blob, calls.get(meta.tool_use_id), focus=turn.directive.text)
        return out

    # ------------------------------------------------------------------ storing results

    def store_result(
        self,
        session: str,
        tool_use_id: str,
        tool_name: str,
        body: bytes | str,
        *,
        is_error: bool = False,
        media_type: str = "text/plain",
        since: int | None = None,
    ) -> dict[str, Any]:
        """Append the whole result as an evidence body, then the tool_result the request carries (in-process one
        append, ``_store_chained``). ``since``:
        the answer's ``entries`` are the session's entries from there on, these included (the AssemblerActor
        folds them at the next step)."""
        meta, blob, text = evidence_body(tool_use_id, tool_name, body, is_error=is_error, media_type=media_type)
        with self._lock:
            pair = self._store_chained(session, meta, blob, text)
            if pair is not None:
                result, result_id = pair
                entries = self.ledger.entries(session, since) if since is not None else None
            else:
                evidence_id = self.ledger.append(session, [meta], blobs=[blob])[0]
                result = tool_result(meta, text, evidence_id)
                if since is None:
                    result_id, entries = self.ledger.append(session, [result])[0], None
                else:
                    ids, entries = self.ledger.append_since(session, [result], since)
                    result_id = ids[0]
        answer = stored_answer(result, result_id)
        if entries is not None:
            answer["entries"] = entries
        return answer

    def _store_chained(self, session: str, meta: EvidenceBody, blob: bytes, text: str) -> tuple[ToolResult, str] | None:
        """In-process, the body and the tool_result naming it in one append (one commit, not two): the body's id
        chained here on the session's head (``At``: its id is the one the writer gives it), the tool_result
        made with it, both appended there. None (nothing written) where the head moved meanwhile (another
        append in flight) or the ledger is an actor: the caller appends them one after the other."""
        store = self.ledger.store
        if store is None:
            return None
        encoded = self.mapper.encode_payload(meta)
        at = At(store.head(session), store.count(session), time.time_ns() // 1000)
        evidence_id = chained(at, session, [encoded], [blob])[0].id
        result = tool_result(meta, text, evidence_id)
        try:
            pair: list[Any] = [encoded, self.mapper.encode_payload(result)]  # encoded: the writer only checks them
            ids = store.append(session, pair, blobs=[blob, None], at=at)
        except ChainMoved:
            return None
        if ids[0] != evidence_id:  # one process, one encoding: cannot happen unless the writer's chaining changed
            raise InvalidInput(f"the ledger wrote the evidence body as {ids[0]}, chained here as {evidence_id}")
        return result, ids[1]

    # ------------------------------------------------------------------ recall, digests, windows

    def recall(self, session: str, args: dict[str, Any], tool_use_id: str | None = None) -> dict[str, Any]:
        """Answer recall({id, range?} | {turn} | {presentation}). With ``tool_use_id`` the answer is
        stored like any tool result (whole as evidence, windowed under its own id when over the limit),
        except a whole body recalled by its id: that result refers to the body's own id (``_refer``)."""
        answer = self._recall_text(session, args)
        if isinstance(answer, RecallError):
            if tool_use_id is not None:
                with self._lock:
                    rid = self.ledger.append(
                        session,
                        [
                            ToolResult(
                                tool_use_id=tool_use_id,
                                tool_name="recall",
                                content=answer.message,
                                is_error=True,
                            )
                        ],
                    )[0]
                return {"content": answer.message, "is_error": True, "result_id": rid}
            return {"content": answer.message, "is_error": True}
        if tool_use_id is None:
            return {"content": answer, "is_error": False}
        whole = self._whole_body(session, args)
        if whole is not None:
            return self._refer(session, tool_use_id, answer, whole)
        return self.store_result(session, tool_use_id, "recall", answer)

    def _whole_body(self, session: str, args: dict[str, Any]) -> str | None:
        """The evidence id whose whole body ``args`` recalls (an id, no range, this session), else None."""
        request = parse_recall_args(args)
        if isinstance(request, RecallError) or request.id is None or request.range is not None \
                or request.chars is not None or request.session not in (None, session):
            return None
        resolved = self._resolve(self.index(session), request.id)
        return None if isinstance(resolved, RecallError) else resolved

    def _refer(self, session: str, tool_use_id: str, text: str, evidence_id: str) -> dict[str, Any]:
        """A recall of a whole stored body answered under that body's own id, never stored again: where
        the request cannot carry it whole, its digest or window names the id the model already recalled,
        not a new one, so the model does not recall the same text again and again under fresh ids."""
        with self._lock:
            carried = window(text, evidence_id)
            result = ToolResult(tool_use_id=tool_use_id, tool_name="recall", content=carried.text,
                                is_error=False, evidence_id=evidence_id, windowed=carried.windowed)
            result_id = self.ledger.append(session, [result])[0]
        return {"evidence_id": evidence_id, "result_id": result_id, "content": carried.text,
                "windowed": carried.windowed, "is_error": False}

    def _recall_text(self, session: str, args: dict[str, Any]) -> str | RecallError:
        request = parse_recall_args(args)
        if isinstance(request, RecallError):
            return request
        if request.session is not None and request.session != session:
            return self._recall_elsewhere(request)
        return self._answer(request, self.index(session))

    def _recall_elsewhere(self, request: RecallRequest) -> str | RecallError:
        """Another session's evidence (a ``session_search`` hit with a scope), read through a store opened
        read-only: never that session's writer lock, so its own writer may be running."""
        other = request.session
        assert other is not None
        try:
            with LedgerStore(self.root, readonly=True) as reader:
                if other not in reader.sessions():
                    return RecallError(f"no session {other!r} in this ledger; pass a session a session_search hit names")
                head = reader.head(other)
                chain = reader.chain_to_root(head) if head is not None else []
                index = TurnIndex.build(chain, self.tokens_per_char, mapper=self.mapper)
                return self._answer(request, index, reader.get)
        except VakError as exc:
            return RecallError(str(exc))

    def _answer(self, request: RecallRequest, index: TurnIndex,
                get: Callable[[str], StoredEntry] | None = None) -> str | RecallError:
        """The text a parsed recall names in ``index``'s session (``get`` reads its entries)."""
        try:
            if request.id is not None:
                resolved = self._resolve(index, request.id)
                if isinstance(resolved, RecallError):
                    stated = index.stated.find(request.id)  # a stated item the <work_contract> had no room for
                    return resolved if stated is None or request.range is not None else stated_text(stated)
                meta, blob = self._body(resolved, get)
                # exactly the lines (and characters) asked for; stored as a tool result, it is windowed
                # under its own id when over the limit, so any recall its window shows names that id
                return select(body_text(blob, meta.encoding), resolved, request.range, request.chars)
            if request.turn is not None:
                turn = (
                    index.turn(request.turn) if isinstance(request.turn, int) else index.by_id(request.turn)
                )
                return record_text(render_turn(turn, self._infos(index, turn, get)))
            assert request.presentation is not None
            for turn in index.turns:
                for pid, pres in turn.presentation_payloads.items():
                    if pid == request.presentation or (
                        len(request.presentation) >= 6 and pid.startswith(request.presentation)
                    ):
                        return (
                            f"presentation {pid} ({pres.semantic_type}, turn {turn.ordinal}): {pres.title}\n"
                            + json.dumps(pres.payload, ensure_ascii=False, indent=2, sort_keys=True)
                        )
            return RecallError(
                f"no presentation {request.presentation!r} in this session. "
                "Use an id from a [presentation:…] reference on a card."
            )
        except VakError as exc:
            return RecallError(str(exc))

    def digest(self, session: str, evidence_id: str) -> str:
        """A closed turn's view of one result (its shape-aware digest, ending with the evidence tag)."""
        index = self.index(session)
        resolved = self._resolve(index, evidence_id)
        if isinstance(resolved, RecallError):
            raise InvalidInput(resolved.message)
        meta, blob = self._body(resolved)
        ordinal = index.turn_of(resolved)  # the call that made it is in its own turn: no walk over the session
        turn = index.turn(ordinal) if ordinal is not None else None  # its directive: the digest its turn shows
        calls, focus = ({ex.tool_use_id: ex.input for ex in turn.exchanges}, turn.directive.text) if turn else ({}, "")
        return evidence_info(resolved, meta, blob, calls.get(meta.tool_use_id), focus=focus).digest

    def window(self, session: str, evidence_id: str) -> str:
        """The current-turn view of one result: verbatim up to the limit, else a window."""
        resolved = self._resolve(self.index(session), evidence_id)
        if isinstance(resolved, RecallError):
            raise InvalidInput(resolved.message)
        meta, blob = self._body(resolved)
        return window(body_text(blob, meta.encoding), resolved).text

    # ------------------------------------------------------------------ presentations and turns

    def present(self, session: str, step_id: str) -> list[dict[str, Any]]:
        """Write the presentations of a step's valid card calls and the calls' results (acks or errors)."""
        with self._lock:
            index = self.index(session)
            turn = index.current
            step = next((s for s in turn.steps if s.id == step_id), None) if turn else None
            if turn is None or step is None:
                raise InvalidInput(
                    f"{step_id} is not a step of the open turn of {session!r}; present cards "
                    "right after appending the step that emits them"
                )
            plans = plan_cards(turn, step)
            records = [p.presentation for p in plans if p.presentation is not None]
            ids = self.ledger.append(session, records) if records else []
            results = card_results(plans, ids)
            if results:
                self.ledger.append(session, results)
        return [r.model_dump(mode="json") for r in results]

    def close_turn(
        self,
        session: str,
        ordinal: int | None = None,
        outcome: Outcome | None = None,
        reading: dict[str, Any] | None = None,
    ) -> str:
        """Write the turn's TurnCard (once) and index it; returns the card's entry id."""
        return self._close(session, ordinal, outcome, reading)[0]

    def close_turn_card(self, session: str, ordinal: int | None = None, outcome: Outcome | None = None,
                        reading: dict[str, Any] | None = None, written: Sequence[StoredEntry] = (),
                        entries: Sequence[StoredEntry] | None = None) -> tuple[str, dict[str, Any] | None]:
        """``close_turn``, and the card as ``card`` gives it (None where the turn was closed before): what a
        turn's driver reports, in the call that writes it (on Ray one crossing, not two: ``RayServices``).
        ``written``: what the turn's driver chained since its last pass, not written yet (``RayServices``):
        folded in, and committed with the card chained after it, in one append (durable before the card, as
        the card's own commit), instead of a call of the driver's before this one. ``entries``: what came before
        ``written`` from where the index ends, as the driver knows it (``index``: no read)."""
        with self._lock:
            self._chained_card = None
            pending = self._fold_written(session, written, entries)
            try:
                # ``entries`` went into the index with ``written``; where those were committed apart, it reads them
                return self._close(session, ordinal, outcome, reading, pending, None if written else entries)
            except BaseException:
                if pending:  # folded, maybe not written: the next look reads what the ledger holds
                    self._indexes.forget(session)
                    if self._unsent:  # no card to commit them with (it failed first): what the turn wrote stands
                        self._unsent = False
                        self.ledger.append_chain(session, pending)
                raise

    def close_turn_card_stated(self, session: str, outcome: Outcome | None = None, written: Sequence[StoredEntry] = (),
                               entries: Sequence[StoredEntry] | None = None,
                               ) -> tuple[str, dict[str, Any] | None, tuple[StatedItem, ...], int | None,
                                          StoredEntry | None]:
        """``close_turn_card``, the stated items in force in the index it brought up to date and how many entries
        that holds: the next turn's, where nothing from there on states one (``RayServices.stated``); and the card's
        entry where it was chained after ``written`` (else None): the driver hands it on with the turn's entries."""
        with self._lock:
            card_id, card = self.close_turn_card(session, None, outcome, written=written, entries=entries)
            return (card_id, card, self._indexes.feed(session, ()).stated.current(), self._indexes.seen(session),
                    self._chained_card)

    def _fold_written(self, session: str, written: Sequence[StoredEntry],
                      entries: Sequence[StoredEntry] | None = None) -> list[StoredEntry]:
        """``written`` folded into the session's index where it continues it (returned, to commit with the
        card); else committed now, where the driver chained them, and read (nothing returned)."""
        self._unsent = bool(written)
        if not written:
            return []
        # what the ledger holds (the turn's passes committed what came before ``written``), its card index checked
        # now: once ``written`` is folded in, the index is ahead of the ledger until the card's commit
        self._check_cards(session, self.index(session, entries))
        if self._indexes.seen(session) != written[0].seq:
            self.ledger.append_chain(session, written)  # ``ChainMoved`` where the head is not where they say
            return []
        self._indexes.feed(session, written)
        return list(written)

    def _close(self, session: str, ordinal: int | None, outcome: Outcome | None, reading: dict[str, Any] | None,
               pending: Sequence[StoredEntry] = (), entries: Sequence[StoredEntry] | None = None,
               ) -> tuple[str, dict[str, Any] | None]:
        with self._lock:
            index = self.index(session, entries) if not pending else self._indexes.feed(session, ())
            turn = index.turn(ordinal) if ordinal is not None else index.current
            if turn is None:
                raise InvalidInput(f"session {session!r} has no turn to close")
            if turn.card_id is not None:
                self._unsent = False
                self.ledger.append_chain(session, pending)
                return turn.card_id, None
            held = {e.id: e for e in pending}  # the last step's bodies are here, not written yet
            card = build_card(
                index,
                turn,
                self._infos(index, turn, (lambda i: held[i] if i in held else self.ledger.get(i)) if held else None),
                outcome=outcome,
                reading=ReadingKey(**reading) if reading else None,
            )
            self._check_cards(session, index)
            self.cards.expect(session)  # a kill before its document is committed is caught up at the next open
            card_id = self._append_card(session, card, pending)
            self.cards.add(session, [card_doc(card_id, card, turn.presentation_payloads)])
            return card_id, {"id": card_id, "turn": turn.ordinal, "asked": card.asked, "outcome": card.outcome,
                             "text": render_card(card, turn.ordinal), "reason": turn.failure}

    def _append_card(self, session: str, card: TurnCard, pending: Sequence[StoredEntry]) -> str:
        """The card appended: after ``pending`` (folded, not written), chained on them, in one commit."""
        if not pending:
            return self.ledger.append(session, [card])[0]
        self._unsent = False  # sent with the card: a failure from here is the commit's own
        last = pending[-1]
        entry = chained(At(last.id, last.seq + 1, time.time_ns() // 1000), session, [self.mapper.encode_payload(card)])
        self.ledger.append_chain(session, [*pending, *entry])
        self._chained_card = entry[0]
        return entry[0].id

    def stated(self, session: str) -> tuple[StatedItem, ...]:
        """The stated items in force now (docs/STATE.md), in budget order; none for a session not written yet."""
        try:
            return self.index(session).stated.current()
        except UnknownSession:
            return ()

    def card(self, session: str, card_id: str) -> dict[str, Any]:
        """One closed turn's card as the public API gives it (id, turn, asked, outcome, text, reason), looked up from
        the newest turn back: what a just-closed turn reports, without shipping the session's whole index."""
        index = self.index(session)
        for turn in reversed(index.turns):
            if turn.card_id == card_id and turn.card is not None:
                return {"id": card_id, "turn": turn.ordinal, "asked": turn.card.asked, "outcome": turn.card.outcome,
                        "text": render_card(turn.card, turn.ordinal), "reason": turn.failure}
        raise InvalidInput(f"card {card_id} is not in session {session!r}")

    def card_text(self, session: str, ordinal: int) -> str:
        turn = self.index(session).turn(ordinal)
        if turn.card is None:
            raise InvalidInput(f"turn {ordinal} of {session!r} is not closed yet; close_turn writes its card")
        return render_card(turn.card, turn.ordinal)

    def search(self, session: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        with self._lock:  # the lock order is this lock, then the card index's (its source reads the TurnIndex)
            self._check_cards(session, self.index(session))
            return self.cards.search(session, query, limit)

    def search_turns(self, session: str, query: str, limit: int = 10) -> list[tuple[int, float]]:
        """Card-index matches as (turn number, score)."""
        with self._lock:
            index = self.index(session)
            self._check_cards(session, index)
            return [(index.by_id(tid).ordinal, score) for tid, score in self.cards.search(session, query, limit)]

    def _check_cards(self, session: str, index: TurnIndex) -> None:
        """Once per session: a card index with another number of turns than the ledger's closed turns (a
        crash lost its buffer, or a writer that indexes nothing wrote the cards) is rebuilt from the ledger."""
        if session in self._cards_checked:
            return
        closed = sum(1 for t in index.turns if t.card_id is not None and t.card is not None)
        if self.cards.count(session) != closed:
            self.rebuild_index(session)
        self._cards_checked.add(session)

    def _card_docs(self, session: str) -> list[CardDoc]:
        if self.ledger.store is not None:
            return docs_from_ledger(self.ledger.store, session)
        return [
            card_doc(t.card_id, t.card, t.presentation_payloads)
            for t in self.index(session).turns
            if t.card_id is not None and t.card is not None
        ]

    def rebuild_index(self, session: str) -> int:
        with self._lock:
            return self.cards.rebuild(session, self._card_docs(session))

    def close(self) -> None:
        """Commit the card index's buffer (a process that ends without it loses those turns from the index
        until the next EvidenceActor on the folder rebuilds them: ``_check_cards``)."""
        self.cards.close()
