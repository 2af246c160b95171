"""``vak serve --ray``: a turn resumed from the client's history (issue 35, item 1) through the folder's actors.
A client brings a history ending in a 50 KB tool result to a server on Ray with an 8,192-token window; the
upstream fails the first try (503, which the client may retry) and answers the retry: the result is stored
once (the retry refers to the evidence the failed try stored, read back through the LedgerActor), the retry's
request carries the call once with its result digested, and the ledger verifies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.script_upstream import ScriptUpstream, call, text
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "The service's log.", "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}}]


def test_a_retry_after_a_failed_upstream_call_on_ray_stores_the_result_once(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    address = str(ray.get_runtime_context().gcs_address)
    upstream = ScriptUpstream([text("The spool disk is full.")])
    failures = [503]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            body = request.content.decode()
            tools = [t["function"]["name"] for t in json.loads(body).get("tools") or []]
            if "read_log" not in tools and SUMMARISER_SYSTEM[:40] not in body:  # the ProbeActor's: no profile
                return httpx.Response(400, json={"error": {"message": "no probes here", "type": "invalid_request_error"}})
            if "read_log" in tools and failures:
                return httpx.Response(failures.pop(), json={"error": {"message": "busy", "type": "server_error"}})
        return upstream.handle(request)

    result = "\n".join(f"2026-12-04T10:{i // 60 % 60:02d}:{i % 60:02d} worker-{i % 7} handled request {i}"
                       for i in range(1_200))[:50_000]
    messages = [{"role": "system", "content": "You are a careful agent."},
                {"role": "user", "content": "Why does the spool service fail?"},
                call("c1", "read_log", service="spool"), {"role": "tool", "tool_call_id": "c1", "content": result}]
    folder = tmp_path / "ledger"
    try:
        with serve(handle) as fake, running(folder, "openai-compat:scripted", fake.base_url, window=8_192,
                                            ray=address) as server:
            def post() -> httpx.Response:
                return httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
                    "model": "scripted", "messages": messages, "tools": TOOLS}, headers={
                    "authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": "ray-resume"})

            failed, done = post(), post()
        with LedgerStore(folder, readonly=True) as store:
            copies = [e for e in store.entries("ray-resume") if e.kind == "evidence_body" and e.blob == result.encode()]
            report = store.verify()
    finally:
        kill_folder_actors(folder)
    assert failed.status_code == 503, failed.text
    assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"] == "The spool disk is full."
    assert len(copies) == 1 and report.ok, report
    sent = upstream.requests[0]["messages"]
    assert [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()] == ["c1"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["c1"]
