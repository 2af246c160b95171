"""The two ways a BFCL entry's model calls are made, each scored by BFCL's own checker (:mod:`.multiturn`).

* **direct** (:func:`run_direct`): what BFCL's OpenAI FC handler does. The whole history and every tool
  of the entry go as they are to an OpenAI-compatible ``/chat/completions`` (``messages``, ``model``,
  ``temperature``, ``tools``; no system prompt); a reply without tool calls ends the turn; more than
  :data:`~.multiturn.MAX_STEPS` steps in a turn force-terminates the entry. Pointed at ``vak serve``'s base URL
  (``--via URL`` in ``bench/bfcl.py``), the same client is the third mode, "through vak serve": each entry
  names its session with the :data:`SESSION_HEADER` header.
* **engine** (:func:`run_engine`): each entry its own session in a fresh ledger, through the public API's
  caller's loop (``session.begin``), the entry's functions registered as the caller's tools, deferred
  (a catalogue line each, loaded through ``find_tools``; a deferred tool called by name runs all the same).
  The engine plans and projects every request; this code posts it and runs the calls on BFCL's backends.

Both record every request the same way (:class:`Sent`, from the server's own ``usage``), so the figures
of :mod:`.report` compare.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from vak_context.farm.bfcl.multiturn import MAX_STEPS, Backend, BfclCall, Entry, Verdict

SESSION_HEADER = "x-vak-session"  # names the session when the direct client is pointed at vak serve
TEMPERATURE = 0.001  # BFCL's handler default
OVER_LENGTH_WORDS = ("maximum context length", "context_length_exceeded", "exceeds the available context size",
                     "exceeds the context window", "context window of this model")


@dataclass(frozen=True)
class Target:
    """The model both modes call: an OpenAI-compatible server's base URL (…/v1), the model name, and the
    auth headers (a bundled model's per-run key; never recorded). ``spec`` is what the engine binds."""

    base_url: str
    model: str
    headers: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = None

    @property
    def spec(self) -> str:
        return f"openai-compat:{self.model}"


@dataclass(frozen=True)
class Sent:
    """One request as the server answered it."""

    status: int
    prompt_tokens: int  # the server's usage (0 for a refused request)
    cached_tokens: int
    over_length: bool  # refused as longer than the model's context


@dataclass
class EntryRun:
    entry_id: str
    category: str
    mode: str
    verdict: Verdict = field(default_factory=lambda: Verdict(False, "not run"))
    sent: list[Sent] = field(default_factory=list)
    seconds: float = 0.0
    refused_calls: int = 0
    session: str = ""  # the session it was named at vak serve (the serve mode), else ""

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.sent)

    @property
    def max_request(self) -> int:
        return max((s.prompt_tokens for s in self.sent), default=0)


def sent_of(status: int, body: Any, text: str) -> Sent:
    usage = (body.get("usage") if isinstance(body, dict) else None) or {}
    details = usage.get("prompt_tokens_details") or {}
    timings = (body.get("timings") if isinstance(body, dict) else None) or {}
    cached = max(int(details.get("cached_tokens") or 0), int(timings.get("cache_n") or 0))  # llama.cpp: cache_n
    over = status == 400 and any(w in text.lower() for w in OVER_LENGTH_WORDS)
    return Sent(status, int(usage.get("prompt_tokens") or 0), cached, over)


async def post(client: httpx.AsyncClient, url: str, body: dict[str, Any],
               headers: Mapping[str, str]) -> tuple[int, Any, Sent]:
    """POST a chat request: (status, the decoded body, the request as the server answered it)."""
    try:
        reply = await client.post(url, json=body, headers=dict(headers))
    except httpx.HTTPError as exc:  # a timeout or a dropped connection ends the entry as a failed request
        data = {"error": {"message": f"{type(exc).__name__}: {exc}"[:500]}}
        return 0, data, Sent(0, 0, 0, False)
    try:
        data = reply.json()
    except ValueError:
        data = {"error": {"message": reply.text[:500]}}
    return reply.status_code, data, sent_of(reply.status_code, data, reply.text)


def _calls_of(message: Mapping[str, Any]) -> list[BfclCall]:
    out = []
    for c in message.get("tool_calls") or []:
        fn = c.get("function") or {}
        out.append(BfclCall(str(c.get("id", "")), str(fn.get("name", "")), fn.get("arguments") or "{}"))
    return out


async def run_direct(entry: Entry, target: Target, client: httpx.AsyncClient, *, max_tokens: int = 1024,
                     session: str | None = None) -> EntryRun:
    """One entry as BFCL's FC handler runs it (``session``: the header value naming it at vak serve)."""
    run, backend, started = EntryRun(entry.id, entry.category, "direct", session=session or ""), Backend(entry), time.monotonic()
    headers = {**target.headers, **({SESSION_HEADER: session} if session else {})}
    messages: list[dict[str, Any]] = []
    try:
        for turn in entry.turns:
            messages.extend(dict(m) for m in turn)
            backend.begin_turn()
            for step in range(MAX_STEPS + 1):
                if step == MAX_STEPS:
                    backend.force_terminated = True
                    break
                body = {"model": target.model, "messages": messages, "tools": list(entry.tools),
                        "temperature": TEMPERATURE, "max_tokens": max_tokens}
                status, data, sent = await post(client, f"{target.base_url}/chat/completions", body, headers)
                run.sent.append(sent)
                if status != 200:  # BFCL's handler raises here: the entry ends with what it has
                    backend.force_terminated = True
                    break
                message = data["choices"][0]["message"]
                messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
                calls = _calls_of(message)
                if not calls:
                    break
                for call, result in zip(calls, backend.execute(calls), strict=True):
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            if backend.force_terminated:
                break
        run.verdict = backend.verdict()
    finally:
        run.refused_calls, run.seconds = backend.refused, time.monotonic() - started
        backend.close()
    return run


def engine_tools(entry: Entry) -> list[Any]:
    """The entry's functions as the caller's tools, deferred: the caller's loop hands their calls back, so
    the registration never runs them (a call the engine ran itself would be an error result)."""
    import vak_context

    def caller_runs(**arguments: Any) -> str:
        raise RuntimeError("a BFCL function is run by the caller's loop, not by the engine")

    return [vak_context.tool(caller_runs, name=t["function"]["name"], description=t["function"]["description"],
                             schema=t["function"]["parameters"], deferred=True) for t in entry.tools]


async def run_engine(entry: Entry, target: Target, client: httpx.AsyncClient, folder: Path, *, window: int,
                     horizon: int | None = None, max_tokens: int = 1024) -> tuple[EntryRun, int]:
    """One entry through the engine: its own session in the fresh ledger ``folder``, the caller's loop.
    Returns the run and the horizon the session planned against."""
    import vak_context

    run, backend, started = EntryRun(entry.id, entry.category, "engine"), Backend(entry), time.monotonic()
    planned = 0
    try:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session(entry.id, model=target.spec, base_url=target.base_url, api_key=target.api_key,
                                      http_client=client, tools=engine_tools(entry), window=window,
                                      horizon=horizon, max_steps=MAX_STEPS, max_tokens=max_tokens) as session:
                planned = session.horizon
                for index in range(len(entry.turns)):
                    backend.begin_turn()
                    if not await _engine_turn(session, entry.directive(index), target, client, backend, run):
                        break
        run.verdict = backend.verdict()
    finally:
        run.refused_calls, run.seconds = backend.refused, time.monotonic() - started
        backend.close()
    return run, planned


async def _engine_turn(session: Any, directive: str, target: Target, client: httpx.AsyncClient,
                       backend: Backend, run: EntryRun) -> bool:
    """One turn of the caller's loop; False when the entry ends here (too many steps, the provider's error)."""
    import vak_context

    steps = 0
    try:
        async with session.begin(directive) as turn:
            while (request := await turn.request()) is not None:
                steps += 1
                if steps > MAX_STEPS:
                    backend.force_terminated = True
                    return False  # leaving the block closes the turn cancelled
                status, data, sent = await post(client, request.url, request.body,
                                                 {**target.headers, **request.headers})
                run.sent.append(sent)
                action = await turn.reply(data, status=status)
                calls = [BfclCall(c.id, c.name, dict(c.arguments)) for c in action.calls]
                for call, result in zip(calls, backend.execute(calls), strict=True) if calls else ():
                    await turn.tool_result(call.id, result)
        return True  # a turn the engine closed (by its rules too) goes on to the next, as BFCL's handler does
    except vak_context.VakError:  # the provider's error after the engine's own retry: the entry ends here
        backend.force_terminated = True
        return False
