"""The scripted model the docs' examples run against (tests/service/test_doc_examples.py): an
OpenAI-compatible chat-completions server's handler (for ``tests.fakes.httpserver.serve``) that plays a good
model's part for each directive the examples send, whichever client sends it (the engine's loop, the caller's
loop, an adapter's framework, ``vak serve``).

Per request, from what the request itself holds: a directive ``SCRIPT`` names is answered by calling its tool
(through ``find_tools`` first when the tool is deferred: not in the request's ``tools`` yet); once the turn
has that tool's result, the answer quotes it; "Which is the oldest?" is answered from the invoices the
request carries (so an example whose projection lost the earlier result gets no answer). A directive the
script does not name is answered with a greeting (a new example that needs a call adds its directive to
``SCRIPT``). Requests without tools (the engine's packet summaries) get a summary. Anything but
``/chat/completions`` is a 404 (the probes an OpenAI-compatible server may not have: ``/apply-template``,
``/props``, ``/models``): every client falls back as it would against such a server.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx

from tests.fakes.embedder import completion, text_of

# directive (a substring of the turn's user message) -> the call a good model makes for it
SCRIPT: dict[str, tuple[str, dict[str, Any]]] = {
    "search the notes for the release": ("web_search", {"query": "release"}),
    "run echo hello": ("run_command", {"command": "echo hello"}),
    "Find the open invoices of ACME": ("search", {"customer": "ACME", "status": "open"}),
    "What is 1 USD in EUR now?": ("exchange_rate", {"base": "USD", "quote": "EUR"}),
    "Search the notes for the release date": ("search_notes", {"query": "release shipped"}),
}
OLDEST = "Which is the oldest?"
INVOICE = re.compile(r"(INV-\d+)[^\n]*?(\d{4}-\d{2}-\d{2})")


class DocModel:
    """The handler, and what it was sent (``bodies``: every chat-completions request body, in order)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # the server answers each request in its own thread

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        with self._lock:
            self.bodies.append(body)
        return httpx.Response(200, json=self.answer(body))

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or ()}
        if not tools:
            return completion(body, "Earlier turns searched notes and ran commands; their results are in the ledger.")
        messages = body["messages"]
        start = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=0)
        asked, turn = text_of(messages[start]), messages[start + 1:]
        called = [c["function"]["name"] for m in turn for c in m.get("tool_calls") or ()]
        results = [m for m in turn if m["role"] == "tool"]
        # The directive is the user message's last words (earlier turns' cards may quote other directives).
        directive = max((*SCRIPT, OLDEST), key=asked.rfind)
        if directive in SCRIPT and directive in asked:
            name, arguments = SCRIPT[directive]
            if name in called and results:
                return completion(body, f"From {name}: {text_of(results[-1])[:300]}")
            # A deferred tool is callable by name once find_tools has returned it (its schema is in the result).
            if name in tools or any(f'"{name}"' in text_of(m) for m in results):
                return completion(body, call=(name, arguments))
            if "find_tools" in tools and "find_tools" not in called:
                return completion(body, call=("find_tools", {"query": name.replace("_", " ")}))
            return completion(body, f"No tool named {name} was offered.")
        if directive == OLDEST and OLDEST in asked:
            found = sorted((date, inv) for inv, date in INVOICE.findall(json.dumps(messages).replace("\\n", "\n")))
            return completion(body, f"The oldest is {found[0][1]}, dated {found[0][0]}." if found
                              else "No invoices are in this conversation.")
        return completion(body, "Hello: this is the scripted model, and no tool of the script fits this request.")
