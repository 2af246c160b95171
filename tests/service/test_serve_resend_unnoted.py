"""A retry appends nothing twice (issue 35, item 1), and a conversation without a session header keeps its
session across a restart.

A request's answer is in the ledger (the turn's card, or the step whose calls wait for the client) before
the ``serve.history`` note that says the client got it; a server killed between the two leaves the answer
unnoted, and the client, which got no reply (or a stream cut before its end), resends the request. The
resend is answered from the ledger: no upstream call, no step or result stored again (also where the kill
came between the answering step and the turn's card). The ledger such a
kill leaves is made exactly: the session as a server wrote it (the server SIGKILLed once it answered), copied
up to the request's note and without it (``IdRemap`` keeps every id a payload names consistent), then served
by a new ``vak serve`` process. The official ``openai`` client sends every request."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.child import serve_child
from vak_context.serve.conversation import HISTORY
from vak_context.storage.ledger_copy import copy_entries

SPEC = "openai-compat:scripted"
SYSTEM = "You are a careful agent."
TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "The service's log.", "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}}]
QUESTION = "Why does the spool service fail?"
RESULT = "worker-3 ERROR the disk quota of /var/spool is exceeded"
ANSWER = "The spool disk is full."
SESSION = "unnoted-1"


def ask(child: Any, messages: list[dict[str, Any]], *, session: str | None = SESSION,
        stream: bool = False) -> dict[str, Any]:
    """One request of the official client (no retries of its own: each resend is the test's); the reply
    message as the client reads it (a stream's deltas joined)."""
    headers = {"x-vak-session": session} if session else {}
    with openai.OpenAI(base_url=child.base_url, api_key=child.key, max_retries=0, timeout=120,
                       default_headers=headers) as client:
        body: Any = [{"role": "system", "content": SYSTEM}, *messages]
        if not stream:
            reply = client.chat.completions.create(model="scripted", tools=TOOLS, messages=body)  # type: ignore[arg-type]
            return reply.choices[0].message.model_dump(exclude_none=True)
        content, calls = "", dict[int, dict[str, Any]]()
        chunks: Any = client.chat.completions.create(model="scripted", tools=TOOLS, messages=body,  # type: ignore[arg-type]
                                                     stream=True)
        for chunk in chunks:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for d in choice.delta.tool_calls or ():
                    part = calls.setdefault(d.index, {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                    part["id"] += d.id or ""
                    if d.function is not None:
                        part["function"]["name"] += d.function.name or ""
                        part["function"]["arguments"] += d.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant"}
        if content:
            message["content"] = content
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message


def killed(child: Any) -> None:
    child.process.send_signal(signal.SIGKILL)
    assert child.process.wait(60) == -signal.SIGKILL


def unnoted(source: Path, target: Path, name: str, before: str = "note") -> None:
    """``target`` holds ``source``'s session ``name`` as a kill right before its last ``serve.history`` note
    (``before="card"``: before the last turn card, the answering step in) leaves it: every entry before
    that one, none from it on."""
    mapper = Mapper()
    with Engine.open(source) as engine:
        store = engine.ledger()
        entries = store.entries(name)
        last = max(i for i, e in enumerate(entries) if (e.kind == "turn_card" if before == "card" else
                                                        e.kind == "activity" and mapper.payload_of(e).activity == HISTORY))
        kept = entries[:last]
    with Engine.open(target) as engine:
        store = engine.ledger()
        copy_entries(kept, mapper.payload_of, name, lambda s, p, b: store.append(s, [p], blobs=[b])[0])


def counts(ledger: Path) -> dict[str, Any]:
    """Across the ledger: its sessions, the assistant steps holding each reply (a call's id, an answer's
    text), the tool results stored for each call, the evidence bodies of the result."""
    mapper = Mapper()
    steps: dict[str, int] = {}
    results: dict[str, int] = {}
    with Engine.open(ledger) as engine:
        store = engine.ledger()
        sessions = sorted(store.sessions())
        entries = [e for n in sessions for e in store.entries(n)]
    for e in entries:
        if e.kind == "assistant_step":
            step = mapper.payload_of(e)
            for key in [step.text] * bool(step.text) + [b.id for b in step.tool_uses]:
                steps[key] = steps.get(key, 0) + 1
        elif e.kind == "tool_result":
            call_id = mapper.payload_of(e).tool_use_id
            results[call_id] = results.get(call_id, 0) + 1
    return {"sessions": sessions, "steps": steps, "results": results,
            "evidence": sum(e.kind == "evidence_body" and e.blob == RESULT.encode() for e in entries)}


@pytest.mark.parametrize(("stream", "before"), [(False, "note"), (True, "note"), (False, "card")],
                         ids=["plain-before-note", "stream-before-note", "plain-before-card"])
def test_a_resend_after_a_kill_once_the_answer_is_in_is_answered_from_the_ledger(
        tmp_path: Path, stream: bool, before: str) -> None:
    upstream = ScriptUpstream([call("c1", "read_log", service="spool"), text(ANSWER), text("Free some space.")])
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first, second = tmp_path / "first", tmp_path / "second"
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=first, base_url=fake.base_url, start_timeout=120) as child:
            reply = ask(child, history)
            history += [reply, {"role": "tool", "tool_call_id": "c1", "content": RESULT}]
            assert ask(child, history, stream=stream) == {"role": "assistant", "content": ANSWER}
            killed(child)
        assert len(upstream.requests) == 2
        unnoted(first, second, SESSION, before)  # the answering step is in (and its card); the note is not
        with serve_child(SPEC, ledger=second, base_url=fake.base_url, start_timeout=120) as child:
            # The client's resend of the request whose reply it never got: from the ledger.
            assert ask(child, history, stream=stream) == {"role": "assistant", "content": ANSWER}
            assert len(upstream.requests) == 2
            # A resend again is the noted exchange's; the next message goes on in the same session.
            assert ask(child, history) == {"role": "assistant", "content": ANSWER}
            history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "What do I do?"}]
            assert ask(child, history)["content"] == "Free some space."
    assert len(upstream.requests) == 3
    assert json.dumps(upstream.requests[2]).count(ANSWER) == 1  # the answer went once into the next request
    found = counts(second)
    assert found["sessions"] == [SESSION]
    assert found["steps"] == {"c1": 1, ANSWER: 1, "Free some space.": 1}
    assert found["results"] == {"c1": 1} and found["evidence"] == 1


def test_a_resend_after_a_kill_before_the_note_of_a_reply_with_calls_gets_the_calls(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "read_log", service="spool"), text(ANSWER)])
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first, second = tmp_path / "first", tmp_path / "second"
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=first, base_url=fake.base_url, start_timeout=120) as child:
            sent = ask(child, history)
            killed(child)
        unnoted(first, second, SESSION)  # the step that made the call is in; the note is not
        with serve_child(SPEC, ledger=second, base_url=fake.base_url, start_timeout=120) as child:
            again = ask(child, history)
            assert len(upstream.requests) == 1  # from the ledger
            assert [c["id"] for c in again["tool_calls"]] == ["c1"] == [c["id"] for c in sent["tool_calls"]]
            history += [again, {"role": "tool", "tool_call_id": "c1", "content": RESULT}]
            assert ask(child, history) == {"role": "assistant", "content": ANSWER}
    assert len(upstream.requests) == 2
    found = counts(second)
    assert found["sessions"] == [SESSION]
    assert found["steps"][ANSWER] == 1 and found["results"] == {"c1": 1} and found["evidence"] == 1


def test_a_conversation_without_a_session_header_keeps_its_session_across_a_kill(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text(ANSWER), text("Free some space.")])
    ledger = tmp_path / "ledger"
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            assert ask(child, history, session=None) == {"role": "assistant", "content": ANSWER}
            before = child.key
            killed(child)
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            assert child.key != before  # a new run's key: the session's name does not come from it
            # The client's resend of the answered request: the same session's exchange, from the ledger.
            assert ask(child, history, session=None) == {"role": "assistant", "content": ANSWER}
            history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "What do I do?"}]
            assert ask(child, history, session=None)["content"] == "Free some space."
    assert len(upstream.requests) == 2
    assert json.dumps(upstream.requests[1]).count(ANSWER) == 1  # from the session's turn, not quoted anew
    found = counts(ledger)
    assert len(found["sessions"]) == 1  # no fork, no second session
    assert found["steps"] == {ANSWER: 1, "Free some space.": 1}
    scope = ledger / "serve-scope"
    assert scope.stat().st_mode & 0o777 == 0o600
    assert before not in scope.read_text() and child.key not in scope.read_text()
