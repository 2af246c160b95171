"""A scripted model for the demo's three questions (bench/demo_compare.py): a loopback OpenAI chat-completions
upstream that reads the workspace through the offered tools and answers **only from what the request it
receives holds**, so a projection that drops what a question needs costs the answer, as it would a real model.

Which question a request asks is the latest user message that holds one of the demo's directives
(``cli/demoscore.py``'s ``DEMO_CHECKS``), the one it holds last (the engine's tail quotes earlier ones before the
directive); "after the directive" is every message that follows that message.

* listing: once a ``list_dir`` result (``./ (N entries)`` and its lines) is after the directive, the answer
  names every entry of it; until then it calls ``list_dir`` with path ``.``.
* readme: once a ``read_file`` result (numbered lines) is after the directive, the answer is the first
  paragraph of the text those lines hold; until then it calls ``read_file`` on ``README.md``.
* test_command: the answer names ``make test`` when the request holds it anywhere outside the directive (a
  README read in an earlier turn, kept in the request); where the request shows a digest's evidence id
  (``[evidence:<id> …]``) and offers ``recall``, it recalls the newest id it has not recalled in this turn, as
  the engine's system prompt asks a model to; where a recall's result shows only its leading lines and names
  the rest (``… shown; recall({...}) returns the rest]``), it makes that call once; past those, ``pytest``.
  It reads no file again ("according to what you read"), so it is right only where the request shows what was read, or recalls it.

With ``fenced=True`` a call is written as Qwen2.5-Coder writes it (a ```` ```json ```` fence in the text, no
``tool_calls``); otherwise as native ``tool_calls``. A request without tools (a packet summary) gets a fixed
summary; any path but ``/chat/completions`` is 404. Every turn request's body is kept (``requests``), and
``usage.prompt_tokens`` is the body's length / 4."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx

from vak_context.cli.demoscore import DEMO_CHECKS, first_paragraph

_LISTING = re.compile(r"\./ \((\d+) entries\)\n")
_NUMBERED = re.compile(r"^\s*\d+\t(.*)$", re.MULTILINE)
_EVIDENCE = re.compile(r"\[evidence:([0-9a-f]+) ")
_REST = re.compile(r"shown; recall\((\{.*?\})\) returns the rest\]")


def content_text(message: dict[str, Any]) -> str:
    """A message's text: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class DemoReader:
    def __init__(self, *, fenced: bool = False) -> None:
        self.fenced = fenced
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._calls = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):
            message: dict[str, Any] = {"role": "assistant", "content": "Earlier turns: the workspace was read."}
        else:
            with self._lock:
                self.requests.append(body)
                self._calls += 1
                call_id = f"call_{self._calls}"
            message = self.reply(body, call_id)
        reply = {"id": "chatcmpl-demo", "object": "chat.completion", "created": 1, "model": "demo-reader",
                 "choices": [{"index": 0, "message": message, "logprobs": None,
                              "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                 "usage": {"prompt_tokens": len(request.content) // 4, "completion_tokens": 9,
                           "total_tokens": len(request.content) // 4 + 9}}
        return httpx.Response(200, json=reply)

    def reply(self, body: dict[str, Any], call_id: str) -> dict[str, Any]:
        messages = body.get("messages") or []
        at, check = len(messages), None
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                text = content_text(messages[i])
                # The directive the message ends on: the engine's tail may quote earlier ones before it.
                at_pos = max(((text.rfind(d), c) for d, c in DEMO_CHECKS.items() if d in text), default=None)
                check = at_pos[1] if at_pos is not None else None
                if check is not None:
                    at = i
                    break
        after = "\n".join(content_text(m) for m in messages[at + 1:])
        if check == "listing":
            found = _LISTING.search(after)
            if found is None:
                return self._call(call_id, "list_dir", {"path": "."})
            lines = after[found.end():].splitlines()[:int(found.group(1))]
            names = [line.split("\t")[0].split(" -> ")[0].rstrip("/") for line in lines]
            return _text("The workspace holds " + ", ".join(names) + ".")
        if check == "readme":
            numbered = _NUMBERED.findall(after)
            if not numbered:
                return self._call(call_id, "read_file", {"path": "README.md"})
            return _text(f"It is this: {first_paragraph(chr(10).join(numbered))}")
        if check == "test_command":
            whole = "\n".join(content_text(m) for i, m in enumerate(messages) if i != at)
            if re.search(r"make\s+test\b", whole):
                return _text("Run `make test`.")
            offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
            recalled = {json.loads(c["function"]["arguments"] or "{}").get("id") for m in messages[at + 1:]
                        for c in m.get("tool_calls") or [] if c["function"]["name"] == "recall"}
            done = [json.loads(c["function"]["arguments"] or "{}") for m in messages[at + 1:]
                    for c in m.get("tool_calls") or [] if c["function"]["name"] == "recall"]
            named = [json.loads(a) for a in reversed(_REST.findall(after))]
            if "recall" in offered and named and named[0] not in done:  # a recall's lead names the rest: read on
                return self._call(call_id, "recall", named[0])
            ids = [i for i in reversed(_EVIDENCE.findall(whole)) if i not in recalled]
            if "recall" in offered and ids:  # as the engine's system prompt asks: expand a digest to read it
                return self._call(call_id, "recall", {"id": ids[0]})
            return _text("Run pytest.")
        return _text("I do not know which question this is.")

    def _call(self, call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.fenced:
            return _text("```json\n" + json.dumps({"name": name, "arguments": arguments}) + "\n```")
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}
