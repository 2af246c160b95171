"""A turn left open by a kill is taken up again (issue 35, the duplicates the load harness counted). ``vak
serve`` is SIGKILLed while a turn waits for the client's tool results (the reply with the calls went out, the
turn is open in the ledger: its directive has no card); restarted on the same ledger, the client's resend with
the results continues that same turn (``Session.reopen``): no new directive, no step recorded again, nothing
withdrawn, one card for the turn; the turn goes on through a second call to its answer, and ``vak verify``
finds the ledger whole. The same when the kill lands while the request after the results is on its way
upstream (the results are stored): the resend continues the turn with each result stored once."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import openai

from tests.fakes.cli import run_vak
from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.child import serve_child

SPEC = "openai-compat:scripted"
SESSION = "reopen-1"
SYSTEM = "You are a careful agent."
TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "The service's log.", "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}}]


def ask(base_url: str, key: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120,
                       default_headers={"x-vak-session": SESSION}) as client:
        reply = client.chat.completions.create(model="scripted", tools=TOOLS,  # type: ignore[arg-type]
                                               messages=[{"role": "system", "content": SYSTEM}, *messages])  # type: ignore[list-item]
    return reply.choices[0].message.model_dump(exclude_none=True)


def session_entries(ledger: Path) -> list[tuple[str, Any]]:
    """(kind, payload) of every entry of the session, in order."""
    mapper = Mapper()
    with Engine.open(ledger) as engine:
        return [(e.kind, mapper.payload_of(e)) for e in engine.ledger().entries(SESSION)]


def test_a_resend_after_a_kill_continues_the_turn_left_open_with_no_step_recorded_again(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "read_log", service="spool"), call("c2", "read_log", service="disk"),
                               text("The spool disk is full.")])
    ledger = tmp_path / "ledger"
    history: list[dict[str, Any]] = [{"role": "user", "content": "Why does the spool service fail?"}]
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            first = ask(child.base_url, child.key, history)
            assert [c["id"] for c in first["tool_calls"]] == ["c1"]
            child.process.send_signal(signal.SIGKILL)  # the turn waits for c1's result: open in the ledger
            assert child.process.wait(60) == -signal.SIGKILL
        history += [first, {"role": "tool", "tool_call_id": "c1", "content": "spool: write failed (ENOSPC)"}]
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            second = ask(child.base_url, child.key, history)
            assert [c["id"] for c in second["tool_calls"]] == ["c2"]
            history += [second, {"role": "tool", "tool_call_id": "c2", "content": "/var/spool: 100% used"}]
            assert ask(child.base_url, child.key, history) == {"role": "assistant", "content": "The spool disk is full."}
    assert len(upstream.requests) == 3  # one call per step: none asked again
    entries = session_entries(ledger)
    kinds = Counter(kind for kind, _ in entries)
    assert kinds["directive"] == 1 and kinds["turn_card"] == 1  # one turn, continued across the kill
    assert [p.outcome for kind, p in entries if kind == "turn_card"] == ["completed"]
    made = [b.id for kind, p in entries if kind == "assistant_step" for b in p.tool_uses]
    assert made == ["c1", "c2"]  # each call's step once
    assert [p.tool_use_id for kind, p in entries if kind == "tool_result"] == ["c1", "c2"]
    activities = {p.activity for kind, p in entries if kind == "activity"}
    assert not activities & {"turn.earlier_step", "history.withdrawn", "turn.cancelled"}
    verified = run_vak("verify", str(ledger))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_kill_while_the_request_after_the_results_is_upstream_leaves_them_stored_once(tmp_path: Path) -> None:
    answer = "The spool disk is full."
    # The second reply goes to the request the kill cuts off; the third to the resend after the restart.
    upstream = ScriptUpstream([call("c1", "read_log", service="spool"), text(answer), text(answer)])
    ledger, result = tmp_path / "ledger", "spool: write failed (ENOSPC)"
    history: list[dict[str, Any]] = [{"role": "user", "content": "Why does the spool service fail?"}]
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            first = ask(child.base_url, child.key, history)
            history += [first, {"role": "tool", "tool_call_id": "c1", "content": result}]
            upstream.hold()
            cut: list[BaseException] = []

            def resend() -> None:
                try:
                    ask(child.base_url, child.key, history)
                except openai.APIConnectionError as exc:  # the server is killed under it
                    cut.append(exc)

            sender = threading.Thread(target=resend)
            sender.start()
            assert upstream.arrived.wait(60)  # c1's result is stored; the next request is upstream
            child.process.send_signal(signal.SIGKILL)
            assert child.process.wait(60) == -signal.SIGKILL
            upstream.release.set()
            sender.join(60)
            assert cut
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            assert ask(child.base_url, child.key, history) == {"role": "assistant", "content": answer}
    assert len(upstream.requests) == 3
    entries = session_entries(ledger)
    kinds = Counter(kind for kind, _ in entries)
    assert kinds["directive"] == 1 and kinds["turn_card"] == 1 and kinds["evidence_body"] == 1
    assert [b.id for kind, p in entries if kind == "assistant_step" for b in p.tool_uses] == ["c1"]
    assert [p.tool_use_id for kind, p in entries if kind == "tool_result"] == ["c1"]
    activities = {p.activity for kind, p in entries if kind == "activity"}
    assert not activities & {"turn.earlier_step", "history.withdrawn", "turn.cancelled"}
    verified = run_vak("verify", str(ledger))
    assert verified.returncode == 0, verified.stdout + verified.stderr
