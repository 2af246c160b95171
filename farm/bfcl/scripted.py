"""A scripted OpenAI-compatible upstream that plays BFCL's ground truth while a request is small and degrades
past a threshold ``T``, as the seed's model did past its horizon (:class:`DegradingModel`); served on
127.0.0.1 by :func:`loopback`. It is what ``bench/bfcl_degrade.py`` and its test run BFCL against, direct
and through the engine (:mod:`.degrade`).

**Size.** A request's size, in tokens, is ``ceil(chars / 4)``, where ``chars`` is the length of the JSON
(``json.dumps``, default separators, ASCII escapes) of its ``messages`` plus that of its ``tools``. The
same figure is the reply's ``usage.prompt_tokens``, so what the engine's probe and receipts measure is what
the model judges by.

**At most T.** The entry the harness names (:meth:`DegradingModel.focus`; base and long_context share
turn texts) is played from its ground truth: the turn is the one whose user text occurs last in the
request's user messages (the direct history and the engine's projection alike), its calls already made are
the calls by the ground truth's names, in order, after that message (first those the engine's step packet in
that message names, for the turn's steps it left out), and the next step sends the calls that
follow, together as far as they need no value only an earlier call of theirs returns (``ls`` then ``cd`` is
two steps); once the turn's calls are made, a text answer. An argument is sent only when its value is
*visible* in the request received (its text occurs in a message's content, a call's name and arguments, or
the tools' schemas), where the whole history (BFCL's handler's messages, played once on BFCL's backends)
shows that value by that call. A value that the whole history never shows (an inference: ``'..'``,
``'proposal.docx'`` from "the proposal", a computed number, a boolean) is sent as the ground truth has it:
the model is never harder on a projection than on the whole history. Where a needed value is missing and
the request offers the engine's ``recall`` tool, the model first recalls the evidence ids the request shows
(``[evidence:<id> …]``, the newest first, one a step, at most six a turn), as the engine's system prompt
asks a model to, then the turns a packet over earlier turns covers (``recall({"turn": N})``, newest first,
as the packet says); then it sends what it sees. A call with an argument left out
fails BFCL's checker unless the function's default happens to give the same state and result.

**Above T.** By the parity of the number of assistant messages in the request (stateless, so a resent
request gets the same answer; each step of a turn adds one, so a turn's steps alternate): even, a text reply
with no call; odd, a malformed call (the next ground-truth function with its arguments cut off mid-JSON,
as a model that loses the thread does). On the probe's ladder the same:
below T the instruction is followed (``probe_ack`` with its nonce) and the negative control answered in
text; above T, no call or a malformed ``probe_ack`` without the nonce.

**Declared window** 131,072 (``/v1/models`` ``meta.n_ctx``, ``/props``), the seed's model's; a request over
it is refused as llama.cpp refuses one (HTTP 400, ``exceed_context_size_error``). A request without tools
(the engine's packet summary) gets a one-line summary that names no value.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from vak_context.farm.bfcl.multiturn import Backend, BfclCall, Entry, ground_truth_call

DECLARED_WINDOW = 131_072
PROBE_TOOL = "probe_ack"  # the probe's ladder offers it (vak_context.agent.probe.history)
PROBE_NONCE = re.compile(r'ack="([^"]*)"')
PROBE_CONTROL = "Do not call any tool"
RECALL_TOOL = "recall"  # the engine's: returns a digested result whole (vak_context.agent.tools.engine)
EVIDENCE = re.compile(r"\[evidence:([0-9a-f]{6,})")
MAX_RECALLS = 6  # a turn's recalls, at most (BFCL's handler ends an entry past 20 steps in a turn)
# The engine's answer to a call it did not run (more than 8 calls in a step, a repeated read): the model
# makes that call again in a later step, as the answer asks.
NOT_RUN = re.compile(r"^\w+: not run\b")
# The engine's step packet (vak_context.context.history.packets.render_step_packet) and its per-call lines.
STEP_PACKET = re.compile(r'<context_summary turn="\d+" steps="\d+-\d+">(.*?)</context_summary>', re.S)
PACKET_CALL = re.compile(r"^- step \d+ (\w+)[(:]", re.M)
NOT_RUN_LINE = re.compile(r"\(error: \w+: not run\b")  # a call the engine did not run: made again
TURNS_PACKET = re.compile(r'<context_summary turns="(\d+)-(\d+)">')  # a packet over earlier turns
PACKET_RECALL = re.compile(r"^- step \d+ recall\b.*?: ([0-9a-f]{6,})", re.M)
SUMMARY = "Earlier turns ran file and API calls."
LOST = "I could not work out which tool to call."


def request_tokens(body: Mapping[str, Any]) -> int:
    """The stated count: ceil(len(JSON of messages) + len(JSON of tools)) / 4)."""
    chars = len(json.dumps(body.get("messages") or [])) + len(json.dumps(body.get("tools") or []))
    return math.ceil(chars / 4)


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def haystack(messages: Iterable[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] = ()) -> str:
    """Every text a request shows: contents, each call's name and arguments, and the tools' schemas."""
    parts = []
    for m in messages:
        parts.append(_text(m))
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    parts.extend(json.dumps(t) for t in tools)
    return "\n".join(parts)


def _forms(value: Any) -> list[str]:
    """How a leaf value may appear in text (its own form, JSON-escaped, a whole float as an integer)."""
    if isinstance(value, str):
        return [value, json.dumps(value)[1:-1]] if value else []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float) and value.is_integer():
        return [repr(value), str(int(value))]
    return [str(value)]


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def visible(value: Any, text: str) -> bool:
    """Every leaf of ``value`` with a textual form occurs in ``text`` (booleans and None always do)."""
    return all(not (forms := _forms(leaf)) or any(f in text for f in forms) for leaf in _leaves(value))


@dataclass(frozen=True)
class Step:
    """One ground-truth call, the step of its turn it is sent in, and the arguments whose values the whole
    history shows by then."""

    name: str
    arguments: dict[str, Any]
    needed: frozenset[str]  # argument names that must be visible in the request for the model to send them
    group: int  # calls of one group go in one step (parallel calls, as BFCL's handler takes them)


def _needed(args: Mapping[str, Any], shown: str) -> frozenset[str]:
    return frozenset(k for k, v in args.items() if visible(v, shown) and any(_forms(x) for x in _leaves(v)))


def _group_messages(index: int, group: list[tuple[BfclCall, str]]) -> list[dict[str, Any]]:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
             for c, _ in group]
    return [{"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c.id, "content": result} for c, result in group)]


def _play(entry: Entry) -> list[list[Step]]:
    """The entry's ground truth as steps, played on BFCL's backends in BFCL's handler's messages. A call
    joins the step before it unless it needs a value only that step's results show (``cd`` after ``ls``);
    an argument is needed where the whole history shows its value by the call."""
    backend = Backend(entry)
    messages: list[dict[str, Any]] = []
    turns: list[list[Step]] = []
    try:
        for index, truth in enumerate(entry.ground_truth):
            messages.extend(dict(m) for m in entry.turns[index])
            backend.begin_turn()
            steps: list[Step] = []
            group: list[tuple[BfclCall, str]] = []
            for n, (name, args) in enumerate(ground_truth_call(c, entry) for c in truth):
                needed = _needed(args, haystack([*messages, *_group_messages(index, group)]))
                if group and needed != _needed({k: args[k] for k in needed}, haystack(messages)):
                    messages.extend(_group_messages(index, group))
                    group = []
                call = BfclCall(f"gt_{index}_{n}", name, args)
                group.append((call, backend.execute([call])[0]))
                steps.append(Step(name, args, needed, (steps[-1].group + (len(group) == 1)) if steps else 0))
            messages.extend(_group_messages(index, group))
            messages.append({"role": "assistant", "content": "Done."})
            turns.append(steps)
    finally:
        backend.close()
    return turns


class DegradingModel:
    """The scripted upstream (module docstring). ``threshold``: T in tokens (None: never degrades, the
    perfect model). ``requests`` records (tokens, over T, what was answered) per chat request."""

    def __init__(self, entries: Iterable[Entry], threshold: int | None, *, name: str = "degrading") -> None:
        self.threshold, self.name = threshold, name
        self.scripts: dict[str, dict[str, list[Step]]] = {}
        for entry in entries:
            script = self.scripts.setdefault(entry.id, {})
            for index, steps in enumerate(_play(entry)):
                key = _text(entry.turns[index][-1]) if entry.turns[index] else ""
                if key and script.setdefault(key, steps) != steps:
                    raise ValueError(f"two turns of {entry.id} share the text {key[:60]!r} with different ground truths")
        self.script: dict[str, list[Step]] = {}
        self.requests: list[tuple[int, bool, str]] = []
        self._lock = threading.Lock()

    def focus(self, entry_id: str) -> None:
        """Play ``entry_id`` from now on. Entries share turn texts (the same question in base and long_context,
        with other files behind it), so the harness says which entry it runs next, as a task is handed to a
        model; which turn and step a request is at is read from the request alone."""
        self.script = self.scripts[entry_id]

    def over(self, tokens: int) -> bool:
        return self.threshold is not None and tokens > self.threshold

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": self.name, "object": "model", "owned_by": "vak-bfcl",
                 "meta": {"n_ctx": DECLARED_WINDOW, "n_ctx_train": DECLARED_WINDOW}}]})
        if path.endswith("/props"):
            return httpx.Response(200, json={"default_generation_settings": {"n_ctx": DECLARED_WINDOW},
                                             "total_slots": 1})
        if not path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        tokens = request_tokens(body)
        if tokens + int(body.get("max_tokens") or 0) > DECLARED_WINDOW:
            return httpx.Response(400, json={"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": tokens, "n_ctx": DECLARED_WINDOW,
                "message": f"request ({tokens} tokens) exceeds the available context size ({DECLARED_WINDOW} tokens)"}})
        answer, what = self.answer(body, tokens)
        with self._lock:
            self.requests.append((tokens, self.over(tokens), what))
        return httpx.Response(200, json=completion(body, tokens, **answer))

    def answer(self, body: Mapping[str, Any], tokens: int) -> tuple[dict[str, Any], str]:
        """The reply's (text, calls) and a word for what it was."""
        messages, tools = list(body.get("messages") or []), list(body.get("tools") or [])
        names = {(t.get("function") or {}).get("name") for t in tools}
        if not tools:
            return {"text": SUMMARY}, "summary"
        probe = PROBE_TOOL in names
        steps = [] if probe else self._next(messages)
        if self.over(tokens):
            if sum(m.get("role") == "assistant" for m in messages) % 2 == 0:
                return {"text": LOST}, "no call"
            if probe:
                name, cut = PROBE_TOOL, '{"ack": '
            elif steps:
                name, cut = steps[0].name, '{"' + next(iter(steps[0].arguments), "value") + '": '
            else:
                name, cut = sorted(str(n) for n in names if n)[0], "{"
            return {"calls": [(name, cut)]}, "malformed"
        if probe:
            last = _text(messages[-1]) if messages else ""
            nonce = PROBE_NONCE.search(last)
            if nonce and PROBE_CONTROL not in last:
                return {"calls": [(PROBE_TOOL, json.dumps({"ack": nonce.group(1)}))]}, "probe followed"
            return {"text": "The last question was about the audit log."}, "probe text"
        if not steps:
            return {"text": "Done."}, "answer"
        shown = haystack(messages, tools)
        calls = [(c.name, {k: v for k, v in c.arguments.items() if k not in c.needed or visible(v, shown)})
                 for c in steps]
        lost = [f"{c.name}.{k}={c.arguments[k]!r}"[:120] for (_, a), c in zip(calls, steps, strict=True)
                for k in c.arguments if k not in a]
        if lost and RECALL_TOOL in names and (recall := self._unrecalled(messages, shown)):
            return {"calls": [(RECALL_TOOL, json.dumps(recall))]}, f"recall {json.dumps(recall)} for {lost[0]}"
        return {"calls": [(n, json.dumps(a)) for n, a in calls]}, f"calls, lost {', '.join(lost)}" if lost else "calls"

    def _unrecalled(self, messages: list[Mapping[str, Any]], shown: str) -> dict[str, Any] | None:
        """The recall to make (at most :data:`MAX_RECALLS` a turn), where a needed value is not shown: the
        newest evidence id the request shows that this turn has not recalled yet (the engine's digest
        stands for a result), else the newest turn a packet over earlier turns covers and names no id of
        (``recall({"turn": N})``, as the packet says), that this turn has not recalled."""
        at = self._turn_at(messages)
        recalls = [(c.get("function") or {}).get("arguments") for m in messages[at + 1:]
                   for c in m.get("tool_calls") or [] if (c.get("function") or {}).get("name") == RECALL_TOOL]
        asked = [_json_arg(a, "id") for a in recalls]
        # recalls of this turn the engine's step packet folded: a whole body recalled keeps its own id
        if at < len(messages):
            asked += PACKET_RECALL.findall("".join(STEP_PACKET.findall(_text(messages[at]))))
        turns = [_json_arg(a, "turn") for a in recalls]
        if len(asked) >= MAX_RECALLS:
            return None
        for evidence in reversed(EVIDENCE.findall(shown)):
            if evidence not in asked:
                return {"id": str(evidence)}
        for first, last in reversed(TURNS_PACKET.findall(shown)):
            for turn in range(int(last), int(first) - 1, -1):
                if turn not in turns:
                    return {"turn": turn}
        return None

    def _turn_at(self, messages: list[Mapping[str, Any]]) -> int:
        for at in range(len(messages) - 1, -1, -1):
            if messages[at].get("role") == "user" and any(key in _text(messages[at]) for key in self.script):
                return at
        return len(messages)

    def _next(self, messages: list[Mapping[str, Any]]) -> list[Step]:
        """The current turn's next step (its calls not yet made): the turn is the one whose user text occurs
        last, and each of its calls counts as made when a call by its name with a JSON object follows that
        user message, in order, unless its result says it was not run; the calls the engine's step packet
        in that message names (steps of this turn it left out) come first."""
        for at in range(len(messages) - 1, -1, -1):
            if messages[at].get("role") != "user":
                continue
            text = _text(messages[at])
            found = [(text.rfind(key), key) for key in self.script if key in text]
            if not found:
                continue
            steps = self.script[max(found)[1]]
            results = {m.get("tool_call_id"): _text(m) for m in messages[at + 1:] if m.get("role") == "tool"}
            made: list[tuple[Any, Any]] = [(name, "{}") for name in packet_calls(text)]
            made += [((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                     for m in messages[at + 1:] for c in m.get("tool_calls") or []
                     if not NOT_RUN.match(results.get(c.get("id"), ""))]
            done = 0
            for name, arguments in made:
                if done < len(steps) and name == steps[done].name and _json_object(arguments):
                    done += 1
            return [c for c in steps[done:] if c.group == steps[done].group] if done < len(steps) else []
        return []


def packet_calls(text: str) -> list[str]:
    """The calls, in order, that the engine's step packets in ``text`` name (``- step k name(args): id`` or
    ``- step k name: id``, inside ``<context_summary turn= steps=>``): earlier steps of the current turn
    that the request no longer carries. A model reads them as calls it has made, except those the line
    says were not run (``(error: name: not run: ...)``)."""
    return [m.group(1) for block in STEP_PACKET.findall(text) for line in block.splitlines()
            if (m := PACKET_CALL.match(line)) and NOT_RUN_LINE.search(line) is None]


def _json_arg(text: Any, key: str) -> Any:
    try:
        value = text if isinstance(text, dict) else json.loads(text or "{}")
    except (TypeError, json.JSONDecodeError):
        return None
    return value.get(key) if isinstance(value, dict) else None


def _json_object(text: Any) -> bool:
    if isinstance(text, dict):
        return True
    try:
        return isinstance(json.loads(text or "{}"), dict)
    except (TypeError, json.JSONDecodeError):
        return False


def completion(body: Mapping[str, Any], tokens: int, *, text: str = "",
               calls: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """OpenAI's documented chat.completion object (``calls``: name and the arguments' text)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": f"call_{tokens}_{i}", "type": "function",
                                  "function": {"name": name, "arguments": arguments}}
                                 for i, (name, arguments) in enumerate(calls)]
    return {"id": "chatcmpl-bfcl-scripted", "object": "chat.completion", "created": 1_764_504_000,
            "model": str(body.get("model", "")),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 20, "total_tokens": tokens + 20,
                      "prompt_tokens_details": {"cached_tokens": 0}}}


@dataclass
class Loopback:
    """A running upstream: ``base_url`` is its OpenAI-style ``…/v1``."""

    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def loopback(model: DegradingModel) -> Iterator[Loopback]:
    """Serve ``model`` on 127.0.0.1 (a free port), each request in its own thread, for the block."""
    handle = model.handle

    class Serve(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            reply = handle(httpx.Request(self.command, f"http://127.0.0.1{self.path}", content=body))
            data = reply.read()
            self.send_response(reply.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client went away before its reply
                self.close_connection = True

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:  # the bench's output stays its table
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Loopback(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
