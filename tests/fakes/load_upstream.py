"""The scripted upstream of bench/serve_load.py: OpenAI chat completions on 127.0.0.1, answering with the
documented reply body (tests/fakes/provider_bodies, as tests/fakes/wire_models.py does) and, for a request
with ``"stream": true``, its server-sent events (tests/fakes/sse_upstream.py).

It holds no state but a call counter, so the same body gets the same answer whether it came through ``vak
serve`` (a projection of the client's history) or straight from the client (the whole history): the load
harness times both. Each directive carries its turn's tag (``[c03-t07] search ...``):

* ``[TAG] search ...`` / ``[TAG] run ...``: a ``web_search`` / ``run_command`` call whose arguments and id
  hold the tag (``call_<TAG>_<n>``);
* ``[TAG] ask ...``: the answer ``Answer: TAG``;
* a directive that quotes a tool result in its text (as ``vak serve`` today words a pending result it did not
  hold: "continuing your earlier request: ... [the result of ...]") is still a directive: the model calls its
  tool again, so the harness sees the turn take more requests than it needs;
* a request whose last message is a tool result: ``Done: TAG``, the tag read from the result's call id (or,
  failing that, from its content);
* a request without tools (the engine's packet summary): a short summary.

Run as a script (``python -m tests.fakes.load_upstream``) it serves until stdin closes or SIGTERM, after
printing ``upstream: base_url=URL``, so a bench runs it in a process of its own."""

from __future__ import annotations

import itertools
import json
import re
import signal
import sys
import threading
from typing import Any

import httpx

from tests.fakes.sse_upstream import streamed
from tests.fakes.wire_models import FORMATS

TAG = re.compile(r"\[(c\d+-t\d+)\] (search|run|ask)\b")
CALL_TAG = re.compile(r"call_(c\d+-t\d+)_")
BARE_TAG = re.compile(r"\b(c\d+-t\d+)\b")
SUMMARY = "Earlier turns searched the notes and ran checks."

_counter = itertools.count(1)
_lock = threading.Lock()


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _directive(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(tag, verb) of the last directive in the request: the last match in the latest user message holding one."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        found = TAG.findall(_text(message.get("content")))
        if found:
            return found[-1]
    return None


def _result_tag(messages: list[dict[str, Any]]) -> str | None:
    last = messages[-1]
    if m := CALL_TAG.search(str(last.get("tool_call_id") or "")):
        return m.group(1)
    found = BARE_TAG.findall(_text(last.get("content")))
    return found[0] if found else None


def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, the documented reply body) for one chat-completions request."""
    wire = FORMATS["openai"]
    messages = body.get("messages") or []
    if not body.get("tools"):
        return 200, wire.reply(body, SUMMARY, [])
    if messages and messages[-1].get("role") == "tool":
        tag = _result_tag(messages)
        return 200, wire.reply(body, f"Done: {tag}" if tag else "Done: (no tag in the result)", [])
    found = _directive(messages)
    if found is None:
        return 400, {"error": {"message": "the scripted upstream found no [TAG] directive", "type": "invalid_request_error",
                               "param": "messages", "code": None}}
    tag, verb = found
    if verb == "ask":
        return 200, wire.reply(body, f"Answer: {tag}", [])
    with _lock:
        n = next(_counter)
    name, arguments = ("web_search", {"query": tag}) if verb == "search" else ("run_command", {"command": f"make check {tag}"})
    return 200, wire.reply(body, "", [(f"call_{tag}_{n}", name, arguments)])


def handle(request: httpx.Request) -> httpx.Response:
    if not request.url.path.endswith("/chat/completions"):
        return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
    body = json.loads(request.content) if request.content else {}
    status, reply = answer(body)
    if status == 200 and body.get("stream"):
        return streamed(reply)
    return httpx.Response(status, json=reply)


def main() -> None:
    from tests.fakes.httpserver import serve

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve(handle) as server:
        print(f"upstream: base_url={server.base_url}", flush=True)
        def until_stdin_closes() -> None:  # the parent's end: its pipe closes when it exits, however it exits
            sys.stdin.read()
            stop.set()

        threading.Thread(target=until_stdin_closes, daemon=True).start()
        stop.wait()


if __name__ == "__main__":
    main()
