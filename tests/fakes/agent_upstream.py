"""The scripted upstream real agents run against (issue 33, item 6): a loopback OpenAI chat-completions
model that plays each task's ideal trajectory and answers **only from what the request it receives
holds**. A call's argument is read from the request's text (the question, or an earlier result the
request carries), the final answer is built from the tool results present in the request; a request
that lacks what the next step needs is answered "I cannot tell ..." and the task fails. So an engine that
drops what the model needs, or puts text of its own in place of it, fails the task.

Which task a request belongs to is read from the request too: the latest task question (``Turn.question``)
its user text holds. Tool-question tasks answer in text, or through the ``final_answer`` tool where the
agent offers one (smolagents); bug-fix tasks (``BugTask``) play mini-swe-agent's ``bash`` steps: read the
file, fix it and run its tests, submit with mini.yaml's ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``.

Every request body is kept (``requests``), with what was answered (``replies``). A request with the
engine's summariser system prompt is a packet summary (``vak serve`` and the adapters summarise through the
session's upstream): it is answered with a summary built from its own text and counted apart (``summaries``).
``usage.prompt_tokens`` is :func:`prompt_tokens` of the body, the one count used for both modes.

Streaming is answered as events (tests/fakes/sse_upstream.py) when a body asks for it.

``text_calls`` (task name to a form) plays a model that writes its calls as text, as the bundled Qwen does:
the task's calls come as the reply's text, never as native tool calls, in one of the forms it writes
(:data:`TEXT_CALL_FORMS`: a ```json fence, an object in doubled braces, a ``<tools>`` tag).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fakes.sse_upstream import streamed

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini.yaml's submit command's output
TESTS_PASSED = "ALL TESTS PASSED"  # what each bug task's test script prints when it passes
FORMAT_ERROR = "No tool calls found"  # mini-swe-agent's answer to a reply without a tool call
CHARS_PER_TOKEN = 4


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt tokens of a chat-completions body, counted the same way for every mode: the characters
    of its ``messages`` and ``tools`` as JSON, over 4 (a stated estimate; the upstream never tokenises)."""
    return chars_of(body) // CHARS_PER_TOKEN


def chars_of(body: Mapping[str, Any]) -> int:
    return len(json.dumps(body.get("messages") or [], ensure_ascii=False)) + len(
        json.dumps(body.get("tools") or [], ensure_ascii=False))


# ------------------------------------------------------------------ the tasks


@dataclass(frozen=True)
class Hop:
    """One tool call of a turn: ``tool({param: arg})``, where ``arg`` is group ``value`` of the regex
    ``arg`` searched in the request's text; done once the regex ``result`` (the call's result) matches
    there. ``result``'s named groups become values the answer can use."""

    tool: str
    param: str
    arg: str
    result: str


@dataclass(frozen=True)
class Turn:
    """One question of a task and its ideal trajectory: the hops in order, then ``answer`` formatted with
    every named group the hops' regexes matched."""

    question: str
    hops: tuple[Hop, ...]
    answer: str


@dataclass(frozen=True)
class QuestionTask:
    """A tool-using question (or two, asked in one conversation) with a known answer per turn."""

    name: str
    turns: tuple[Turn, ...]
    expected: tuple[str, ...]  # the final answer of each turn, as the ideal trajectory gives it
    keys: tuple[tuple[str, ...], ...]  # per turn, the values an answer in any words must hold
    big: bool = False  # a tool of this task returns 20+ KB


@dataclass(frozen=True)
class BugTask:
    """A bug in a small scratch repository, fixed by replacing ``old`` with ``new`` in ``path``; checked by
    running ``test`` (a script that prints ``TESTS_PASSED`` when it passes). ``silent_once``: the upstream
    answers once without a tool call after reading the file (mini-swe-agent drops that reply and asks
    again)."""

    name: str
    issue: str
    files: Mapping[str, str]
    path: str
    old: str
    new: str
    test: str
    silent_once: bool = False


Task = QuestionTask | BugTask


def request_text(messages: Sequence[Mapping[str, Any]], roles: Iterable[str] = ("user", "assistant", "tool")) -> str:
    """The text of the messages of ``roles`` (string or text parts; never a call's arguments)."""
    wanted = set(roles)
    parts: list[str] = []
    for m in messages:
        if m.get("role") not in wanted:
            continue
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text") or "" for p in content if isinstance(p, Mapping)]
    return "\n".join(parts)


# ------------------------------------------------------------------ the upstream


@dataclass
class Reply:
    """What the upstream answered: its text and its calls (name, arguments)."""

    text: str
    calls: list[tuple[str, dict[str, Any]]]


@dataclass
class AgentUpstream:
    """The scripted upstream over ``tasks``; ``handle`` is an httpx handler (tests/fakes/httpserver.py)."""

    tasks: Sequence[Task]
    requests: list[dict[str, Any]] = field(default_factory=list)  # every chat body, summaries included
    replies: list[Reply] = field(default_factory=list)  # what each agent request was answered
    summaries: int = 0
    text_calls: Mapping[str, str] = field(default_factory=dict)  # task name -> a TEXT_CALL_FORMS key
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):  # no tokenizer endpoint: the engine estimates
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        summary = is_summary(body)
        reply = Reply(_summary(body), []) if summary else self.answer(body)
        with self._lock:
            self.requests.append(body)
            if summary:
                self.summaries += 1
            else:
                self.replies.append(reply)
        out = completion(body, reply)
        return streamed(out) if body.get("stream") else httpx.Response(200, json=out)

    def answer(self, body: Mapping[str, Any]) -> Reply:
        messages = body.get("messages") or []
        tools = {(t.get("function") or t).get("name") for t in body.get("tools") or ()}
        asked = request_text(messages, ("user",))
        task, turn = _task_of(self.tasks, asked)
        if task is None:
            return Reply("I cannot tell which task this is: no question I know is in the request.", [])
        text = request_text(messages)
        if isinstance(task, BugTask):
            return _bug_step(task, text, "bash" in tools)
        assert turn is not None
        reply = _question_step(turn, text, "final_answer" in tools)
        form = self.text_calls.get(task.name)
        if form is None or not reply.calls:
            return reply
        return Reply("\n".join(TEXT_CALL_FORMS[form](name, args) for name, args in reply.calls), [])


# How the bundled Qwen writes a call in its text (seen through llama.cpp, which parses none of them).
TEXT_CALL_FORMS = {
    "fence": lambda name, args: "```json\n" + json.dumps({"name": name, "arguments": args}, indent=2) + "\n```",
    "braces": lambda name, args: "{" + json.dumps({"name": name, "arguments": args}) + "}",
    "tag": lambda name, args: "<tools>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tools>",
}


def is_summary(body: Mapping[str, Any]) -> bool:
    """Whether a request is the engine's summariser call (its system prompt is the summariser's), not the
    agent's (an agent may call without tools too: smolagents asks for a last answer that way)."""
    from vak_context.context.history.packets import SUMMARISER_SYSTEM

    return any(m.get("role") == "system" and str(m.get("content") or "").startswith(SUMMARISER_SYSTEM[:60])
               for m in body.get("messages") or ())


def _task_of(tasks: Sequence[Task], asked: str) -> tuple[Task | None, Turn | None]:
    """The task, and its turn, whose question comes last in the request's user text."""
    best: tuple[int, Task | None, Turn | None] = (-1, None, None)
    for task in tasks:
        if isinstance(task, BugTask):
            at = asked.rfind(task.issue)
            if at > best[0]:
                best = (at, task, None)
            continue
        for turn in task.turns:
            at = asked.rfind(turn.question)
            if at > best[0]:
                best = (at, task, turn)
    return best[1], best[2]


def _question_step(turn: Turn, text: str, final_tool: bool) -> Reply:
    values: dict[str, str] = {}
    for hop in turn.hops:
        found = re.search(hop.arg, text)
        if found is None:
            return Reply(f"I cannot tell: the request holds no value for {hop.tool}'s {hop.param}.", [])
        values[hop.param] = found.group("value")
        done = re.search(hop.result, text)
        if done is None:
            return Reply("", [(hop.tool, {hop.param: found.group("value")})])
        values.update(done.groupdict())
    answer = turn.answer.format(**values)
    return Reply("", [("final_answer", {"answer": answer})]) if final_tool else Reply(answer, [])


def _bug_step(task: BugTask, text: str, bash: bool) -> Reply:
    if not bash:
        return Reply("I cannot tell: no bash tool is offered.", [])
    if TESTS_PASSED in text:
        return Reply("The tests pass; submitting.", [("bash", {"command": f"echo {SUBMIT}"})])
    if task.old not in text:  # the file's text has not been read yet (or the request lost it)
        return Reply(f"Let me read {task.path}.", [("bash", {"command": f"cat {task.path}"})])
    if task.silent_once and FORMAT_ERROR not in text:
        return Reply(f"The bug is in {task.path}: I will replace the faulty line.", [])
    fix = (f"python -c \"import pathlib; p = pathlib.Path('{task.path}'); "
           f"p.write_text(p.read_text().replace('{task.old}', '{task.new}'))\" && {task.test}")
    return Reply(f"Fixing {task.path} and running its tests.", [("bash", {"command": fix})])


def _summary(body: Mapping[str, Any]) -> str:
    """A packet summary made only of the request's own words (its first user line)."""
    text = request_text(body.get("messages") or [], ("user",)).strip().splitlines()
    return f"Summary: {text[0][:200]}" if text else "Summary: nothing."


def completion(body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    """A chat.completion body (OpenAI's documented shape) for ``reply``; call ids are unique per request."""
    seed = hashlib.blake2b(json.dumps(body.get("messages") or [], sort_keys=True).encode(), digest_size=6).hexdigest()
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": f"call_{seed}_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(reply.calls)]
    prompt = prompt_tokens(body)
    return {"id": f"chatcmpl-{seed}", "object": "chat.completion", "created": 1, "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 16, "total_tokens": prompt + 16}}


# ------------------------------------------------------------------ what the engine adds


def extra_tail_chars() -> int:
    """What one more directive's tail adds to a request (counted as :func:`chars_of` counts): the tail's
    text part (``<turn_context>``, ``<stance>``) before the directive's own text, from the engine's own
    definitions."""
    from vak_context.context.request.assemble import Tail, render_tail

    parts = [{"type": "text", "text": render_tail(Tail(now=0.0))}, {"type": "text", "text": ""}]
    return len(json.dumps(parts, ensure_ascii=False)) - len(json.dumps("", ensure_ascii=False))


def engine_fixed_chars(client_system: str, questions: Sequence[str], *, identity: str | None = None,
                       tool_keys: Mapping[str, Any] | None = None) -> int:
    """The characters the engine adds to one request whatever the task (counted as :func:`chars_of` counts
    them): its own tools (``recall``, ``find_tools``, ``session_search``, ``commitments`` as OpenAI function declarations,
    after the client's), its system prompt in place of the client's (``identity``, by default the client's
    system prompt or, without one, the engine's default identity, then the engine's contract layer), and
    the turn's tail before the directive (``<turn_context>``, ``<stance>``, a ``<thread>`` naming the task's
    earlier questions), the directive turned into text parts. Derived from the engine's own definitions,
    not measured against the run it bounds."""
    from vak_context.context.request.assemble import DEFAULT_IDENTITY, Tail, render_tail, system_prompt
    from vak_context.engine.api import engine_tool_specs

    # ``tool_keys``: what the client's framework adds to every function declaration it sends (the Agents
    # SDK's ``"strict": false``): under an adapter the engine's tools reach the upstream through it too.
    tools = [{"type": "function", "function": {**spec, **(tool_keys or {})}} for spec in engine_tool_specs()]
    added = len(json.dumps(tools, ensure_ascii=False)) + 2  # ", " joining them to the client's list
    engine_system = system_prompt(identity=identity or client_system or DEFAULT_IDENTITY)
    added += len(json.dumps({"role": "system", "content": engine_system}, ensure_ascii=False)) + 2
    if client_system:
        added -= len(json.dumps({"role": "system", "content": client_system}, ensure_ascii=False)) + 2
    question = questions[-1] if questions else ""
    tail = render_tail(Tail(now=0.0, thread=tuple(questions[:-1])))
    parts = [{"type": "text", "text": tail}, {"type": "text", "text": question}]
    added += len(json.dumps(parts, ensure_ascii=False)) - len(json.dumps(question, ensure_ascii=False))
    return max(added, 0)
