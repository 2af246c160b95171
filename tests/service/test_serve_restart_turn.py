"""A turn continues after any restart (issue 35, item 1). ``vak serve`` with an 8,192-token window is stopped
between the reply that made a call and the client's resend of its history with the call's 50 KB result, by
SIGTERM (a clean stop: the open turn is closed ``cancelled``) and by SIGKILL (left open in the ledger);
restarted on the same ledger, the resend completes the turn with one upstream call, the result is stored
once (as evidence, projected digested or windowed, never quoted into a directive), a second resend is
answered from the ledger, and ``vak verify`` finds the ledger whole. The same holds for a 50 KB result in the
history a client brings to a server that never saw it, and for a retry after the upstream failed (the result
stored by the failed try is referred to, not stored again). A request that cannot fit even digested gets a
400 that says why and what to do (not a 502 inviting the same request again)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.cli import run_vak
from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.child import serve_child

SPEC = "openai-compat:scripted"
WINDOW = 8_192
SYSTEM = "You are a careful agent."
TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "The service's log.", "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}}]
QUESTION = "Why does the spool service fail?"
ANSWER = "The spool disk is full."
MARK = "worker-3 ERROR the disk quota of /var/spool is exceeded"


def log_50kb() -> str:
    lines = [f"2026-12-04T10:{i // 60 % 60:02d}:{i % 60:02d} worker-{i % 7} handled request {i} in {i % 97} ms"
             for i in range(1_000)]
    lines[640] = f"2026-12-04T10:10:40 {MARK}"
    return "\n".join(lines)[:50_000]


def post(base_url: str, key: str, messages: list[dict[str, Any]], session: str | None = None,
         stream: bool = False) -> httpx.Response:
    body = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM}, *messages], "tools": TOOLS,
            **({"stream": True} if stream else {})}
    headers = {"authorization": f"Bearer {key}", **({"x-vak-session": session} if session else {})}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=120, headers=headers)


def answer_of(response: httpx.Response) -> str:
    """The reply's text, plain or streamed (server-sent events)."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return str(response.json()["choices"][0]["message"]["content"])
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def stored(ledger: Path, body: str) -> dict[str, int]:
    """Across the ledger: evidence bodies holding ``body``, and directives quoting a line of it."""
    mapper, data = Mapper(), body.encode()
    with Engine.open(ledger) as engine:
        store = engine.ledger()
        entries = [e for name in store.sessions() for e in store.entries(name)]
        return {"evidence": sum(e.kind == "evidence_body" and e.blob == data for e in entries),
                "directives": sum(e.kind == "directive" and MARK in mapper.payload_of(e).text for e in entries)}


def well_formed(body: dict[str, Any]) -> list[str]:
    """The tool call ids of an OpenAI request, once each, every one answered by the message after it."""
    ids = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    assert len(ids) == len(set(ids)) and sorted(ids) == sorted(answered), body["messages"]
    return ids


def ask(base_url: str, key: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One request of the official ``openai`` client (no retries of its own: each resend is the test's)."""
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120,
                       default_headers={"x-vak-session": "restart-1"}) as client:
        reply = client.chat.completions.create(model="scripted", tools=TOOLS,  # type: ignore[arg-type]
                                               messages=[{"role": "system", "content": SYSTEM}, *messages])  # type: ignore[list-item]
    return reply.choices[0].message.model_dump(exclude_none=True)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_turn_with_a_50kb_pending_result_continues_after_a_restart(tmp_path: Path, stop: signal.Signals) -> None:
    upstream = ScriptUpstream([call("c1", "read_log", service="spool"), text(ANSWER)])
    ledger, result = tmp_path / "ledger", log_50kb()
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, window=WINDOW, start_timeout=120) as child:
            first = ask(child.base_url, child.key, history)
            assert [c["id"] for c in first["tool_calls"]] == ["c1"]
            child.process.send_signal(stop)  # the turn waits for c1's result: it is lost with the process
            assert child.process.wait(60) == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
        history += [first, {"role": "tool", "tool_call_id": "c1", "content": result}]
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, window=WINDOW, start_timeout=120) as child:
            assert ask(child.base_url, child.key, history) == {"role": "assistant", "content": ANSWER}
            assert len(upstream.requests) == 2  # one upstream call after the restart
            # The client's retry of the same request (its reply lost on the way): from the ledger.
            assert ask(child.base_url, child.key, history) == {"role": "assistant", "content": ANSWER}
    assert len(upstream.requests) == 2
    assert well_formed(upstream.requests[1]) == ["c1"]
    sent = json.dumps(upstream.requests[1])
    assert "handled request 500 " not in sent  # the result went as its digest, not whole
    assert f"641: 2026-12-04T10:10:40 {MARK}" in sent  # the digest quotes the line naming the question's "spool"
    assert stored(ledger, result) == {"evidence": 1, "directives": 0}
    verified = run_vak("verify", str(ledger))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_50kb_result_in_the_history_a_client_brings_to_a_new_server_works_first_time(tmp_path: Path,
                                                                                       stream: bool) -> None:
    upstream = ScriptUpstream([text(ANSWER), text("Free some space on /var/spool.")])
    result = log_50kb()
    history = [{"role": "user", "content": QUESTION}, call("c1", "read_log", service="spool"),
               {"role": "tool", "tool_call_id": "c1", "content": result}]
    with serve(upstream.handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url, window=WINDOW) as server:
        assert answer_of(post(server.base_url, CLIENT_KEY, history, stream=stream)) == ANSWER
        # The session goes on from there as from any answered turn.
        history += [text(ANSWER), {"role": "user", "content": "What do I do?"}]
        assert answer_of(post(server.base_url, CLIENT_KEY, history, stream=stream)) == "Free some space on /var/spool."
    assert len(upstream.requests) == 2 and well_formed(upstream.requests[0]) == ["c1"]
    assert stored(tmp_path / "ledger", result) == {"evidence": 1, "directives": 0}


def test_the_same_in_the_anthropic_protocol(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text(ANSWER)])
    result = log_50kb()
    body = {"model": "scripted", "max_tokens": 512, "system": SYSTEM, "tools": [
        {"name": "read_log", "description": "The service's log.", "input_schema": TOOLS[0]["function"]["parameters"]}],
        "messages": [{"role": "user", "content": QUESTION},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_log",
                                                        "input": {"service": "spool"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]}]}
    with serve(upstream.handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url, window=WINDOW) as server:
        reply = httpx.post(f"{server.url}/v1/messages", json=body, timeout=120, headers={
            "x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"})
    assert reply.status_code == 200, reply.text
    assert [b["text"] for b in reply.json()["content"] if b["type"] == "text"] == [ANSWER]
    assert len(upstream.requests) == 1 and well_formed(upstream.requests[0]) == ["toolu_1"]
    assert stored(tmp_path / "ledger", result) == {"evidence": 1, "directives": 0}


def test_a_retry_after_the_upstream_failed_stores_the_result_once(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text(ANSWER)])
    failures = [503]  # the first turn request fails; the script answers the rest

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions") and json.loads(request.content).get("tools") and failures:
            return httpx.Response(failures.pop(), json={"error": {"message": "busy", "type": "server_error"}})
        return upstream.handle(request)

    result = log_50kb()
    history = [{"role": "user", "content": QUESTION}, call("c1", "read_log", service="spool"),
               {"role": "tool", "tool_call_id": "c1", "content": result}]
    with serve(handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url, window=WINDOW) as server:
        failed = post(server.base_url, CLIENT_KEY, history, "retry-1")
        assert failed.status_code == 503, failed.text  # the upstream's own status: the client may retry
        assert answer_of(post(server.base_url, CLIENT_KEY, history, "retry-1")) == ANSWER
    assert not failures and len(upstream.requests) == 1 and well_formed(upstream.requests[0]) == ["c1"]
    assert stored(tmp_path / "ledger", result) == {"evidence": 1, "directives": 0}


def test_a_request_that_cannot_fit_even_digested_is_a_400_that_says_what_to_do(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text(ANSWER)])
    words = " ".join(f"word{i}" for i in range(12_000))  # the user's own words: a directive is never digested
    with serve(upstream.handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url, window=WINDOW) as server:
        refused = post(server.base_url, CLIENT_KEY, [{"role": "user", "content": words}], "big-1")
        again = post(server.base_url, CLIENT_KEY, [{"role": "user", "content": words}], "big-1")
        assert answer_of(post(server.base_url, CLIENT_KEY, [{"role": "user", "content": QUESTION}], "small-1")) == ANSWER
    for response in (refused, again):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert "cannot fit" in error["message"] and "--window" in error["message"]
        assert "Traceback" not in error["message"] and "vak_context" not in error["message"]
    assert len(upstream.requests) == 1  # the small session's: nothing of the big one was sent
