"""In-process, ``EvidenceActor.store_result`` writes a result's evidence body and the tool_result naming it in one
append (one record batch, one commit): the body's id is chained on the session's head (``At``) before either is
written, so the tool_result can name it. The entries are the ones two appends wrote (kinds, order, chain)."""

from __future__ import annotations

from pathlib import Path

from vak_context.actors.evidence import EvidenceActor
from vak_context.events.payloads import Directive, EvidenceBody, ToolResult
from vak_context.storage.ledger import LedgerStore


def test_a_body_and_its_result_are_one_commit_chained_as_two_appends_chain_them(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        actor = EvidenceActor(str(root), store)
        (directive,) = store.append("s", [Directive(text="look it up")])
        before = store.commits("s")
        answer = actor.store_result("s", "call_1", "lookup", "the note says 42", since=1)
        assert store.commits("s") == before + 1  # one batch, one fsync (the session is not held)
        body, result = store.entries("s")[1:]
        assert (body.parent, result.parent) == (directive, body.id) and (body.seq, result.seq) == (1, 2)
        assert body.blob == b"the note says 42"
        meta, carried = actor.mapper.payload_of(body), actor.mapper.payload_of(result)
        assert isinstance(meta, EvidenceBody) and isinstance(carried, ToolResult)
        assert (meta.tool_use_id, meta.tool_name) == ("call_1", "lookup")
        assert carried.evidence_id == body.id == answer["evidence_id"] and answer["result_id"] == result.id
        assert carried.content == answer["content"] and "42" in carried.content
        assert [e.id for e in answer["entries"]] == [body.id, result.id]  # ``since``: what the assembler folds
        assert actor.digest("s", body.id)  # the evidence actor's own fold finds the body
        actor.close()
