"""BFCL single-turn questions asked after K tokens of real recorded agent history, direct and through the
engine, scored by BFCL's own AST checker (:mod:`.single`): does a model answer as well at the end of a
long session as at its start, and does the engine keep it so? (issue 36 item 2; ``bench/bfcl_history.py``.)

**The history** is real recorded agent history from ``shared/data/trajectories``, read by the engine's
importers (``read_recordings``, as ``vak import`` reads it): by default the tau-bench airline file, gpt-4o
serving one customer after another with its airline tools (JSON results), its sessions one after another as
one long session of many turns (:func:`read_history`; a coding session's large tool results leave too few
cut points below 8k tokens). For K tokens, the history is the longest prefix of its events that ends at a
closed point (every call answered, or a step without calls) and whose messages, with the recorded system
prompt, count at most K tokens by the stated count (``ceil(chars of their JSON / 4)``,
:func:`~.scripted.request_tokens`). K = 0 is no history at all. Every entry is asked after the same
prefix at a given K, and the same entries at every K.

**direct**: the history as a plain agent sends it (the recorded system prompt, every user message, step and
tool result as OpenAI chat messages, verbatim), then the entry's question; ``tools`` are the entry's
functions only: the history's own tools (the airline API for tau-bench) are *not* offered (its calls stay in
the messages). One request, temperature 0; its calls are the reply BFCL checks.

**engine**: the same prefix imported into a fresh ledger (``import_recording``: the engine's own session,
one closed turn per recorded directive), then the question as the next turn of that session through the
public API's caller's loop, the entry's functions the caller's tools (not deferred: a single-turn question
gets one reply). The engine's own tools (recall, find_tools, ...) are the engine's: the first reply that
calls the caller's tools is the one BFCL checks (at most :data:`MAX_STEPS` requests). The ledger holds the
probe's profile where the harness probed, so the engine plans against the measured horizon.

**Calls.** Both modes read a reply's calls the same way: its native ``tool_calls``, and where the model
writes its calls as text (``text_calls``: the bundled Qwen models write a ```json fence even when sent
``tools``; the catalogue's protocol says so) those in its text, by the engine's own parser; the engine's
session is told the same (``calls="text"``).

A run's size is the prompt tokens of the request whose reply was checked, as the server counted them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from vak_context.errors import InvalidInput, VakError
from vak_context.events.blocks import TextBlock, ToolUseBlock
from vak_context.farm.bfcl.modes import Sent, Target, post
from vak_context.farm.bfcl.multiturn import Verdict
from vak_context.farm.bfcl.scripted import request_tokens
from vak_context.farm.bfcl.single import SingleEntry, check

SIZES = (0, 2_000, 4_000, 6_000, 7_500)
MODES = ("direct", "engine")
DEFAULT_HISTORY = "tau-bench__gpt-4o-airline.json"
SESSION = "history"
MAX_STEPS = 4  # engine requests per question (its own tools' steps included) before it counts as no reply
NO_REPLY = "no reply with a call"


def trajectories() -> Path:
    """The recorded sessions: ``data/trajectories`` of the shared folder (``$VAK_SHARED``, else ``../shared``)."""
    from vak_context.farm.spec.entries import shared_root

    return shared_root() / "data" / "trajectories"


def read_history(path: str | Path | None = None, select: str = "") -> Any:
    """The recording (``vak_context.importers.Recording``) the history is cut from: the recordings of
    ``path`` (default the tau-bench airline file in the shared trajectories) one after another, in the file's
    order, as one session of many turns (the first system prompt kept, later ones and notes left out), or only
    those whose name ends in ``select``."""
    from vak_context.importers import Note, Recording, SystemPrompt, read_recordings

    file = Path(path) if path else trajectories() / DEFAULT_HISTORY
    fmt, recordings, _skipped = read_recordings(file)
    chosen = [r for r in recordings if r.name.endswith(select)] if select else recordings
    if not chosen:
        raise InvalidInput(f"no recording in {file} has a name ending in {select!r}: "
                           f"its first are {', '.join(r.name for r in recordings[:5])}")
    events: list[Any] = []
    for r in chosen:
        events += [e for e in r.events if not isinstance(e, Note) and not (isinstance(e, SystemPrompt) and events)]
    name = chosen[0].name if len(chosen) == 1 else f"{file.name.split('.')[0]} (its sessions in order)"
    return Recording(name, fmt, events, source=dict(chosen[0].source))


def to_messages(events: Sequence[Any]) -> list[dict[str, Any]]:
    """A recording's events as the OpenAI chat messages a plain agent sends (thinking and notes left out)."""
    from vak_context.importers import (
        CompactionMark,
        ControlText,
        ModelStep,
        SystemPrompt,
        ToolOutput,
        UserText,
    )

    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, SystemPrompt):
            out.append({"role": "system", "content": e.text})
        elif isinstance(e, UserText | ControlText):
            out.append({"role": "user", "content": e.text})
        elif isinstance(e, CompactionMark):
            out.append({"role": "user", "content": e.summary})
        elif isinstance(e, ModelStep):
            text = "".join(b.text for b in e.blocks if isinstance(b, TextBlock))
            calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                     for b in e.blocks if isinstance(b, ToolUseBlock)]
            out.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
        elif isinstance(e, ToolOutput):
            body = e.body.decode("utf-8", "replace") if isinstance(e.body, bytes) else e.body
            out.append({"role": "tool", "tool_call_id": e.tool_use_id, "content": body})
    return out


@dataclass(frozen=True)
class History:
    """A prefix of the recording: its events (what the engine imports) and messages (what direct sends)."""

    k: int  # the size asked for
    tokens: int  # its messages' size by the stated count
    events: tuple[Any, ...]
    messages: tuple[dict[str, Any], ...]


def cut(recording: Any, k: int) -> History:
    """The longest prefix of ``recording`` ending at a closed point whose messages count at most ``k``."""
    from vak_context.importers import ModelStep, SystemPrompt, ToolOutput

    if k <= 0:
        return History(k, 0, (), ())
    events, best = list(recording.events), 0
    pending: set[str] = set()
    for n, e in enumerate(events, 1):
        if isinstance(e, ModelStep):
            pending |= {b.id for b in e.blocks if isinstance(b, ToolUseBlock)}
        elif isinstance(e, ToolOutput):
            pending.discard(e.tool_use_id)
        closed = not pending and isinstance(e, ModelStep | ToolOutput)
        if closed or isinstance(e, SystemPrompt):
            if request_tokens({"messages": to_messages(events[:n])}) > k:
                break
            best = n if closed else best
    chosen = events[:best]
    messages = to_messages(chosen)
    return History(k, request_tokens({"messages": messages}) if messages else 0, tuple(chosen), tuple(messages))


@dataclass
class Asked:
    """One entry asked after one history in one mode: the verdict and every request made."""

    entry_id: str
    category: str
    k: int
    mode: str
    verdict: Verdict = field(default_factory=lambda: Verdict(False, "not run"))
    sent: list[Sent] = field(default_factory=list)
    history_tokens: int = 0
    seconds: float = 0.0

    @property
    def size(self) -> int:
        """The prompt tokens of the request whose reply was checked (the last one made)."""
        return next((s.prompt_tokens for s in reversed(self.sent) if s.prompt_tokens), 0)


def reply_calls(message: Mapping[str, Any], names: Sequence[str] = (), *, text_calls: bool = False) -> list[tuple[str, Any]]:
    """A reply's calls as (name, arguments): its native ``tool_calls``; where there are none and the model
    writes its calls as text (``text_calls``), those in its text, read by the engine's own parser
    (``parse_tool_calls``, as the engine reads them with ``calls="text"``). A call without a name or whose
    arguments are not a JSON object stays, with its arguments as text, for the checker to fail."""
    native = [(str((c.get("function") or {}).get("name", "")), (c.get("function") or {}).get("arguments") or "{}")
              for c in message.get("tool_calls") or []]
    if native or not text_calls:
        return native
    from vak_context.context.request.toolcalls import parse_tool_calls

    content = message.get("content")
    return [(c.name or "", c.arguments if c.arguments is not None else "not a JSON object")
            for c in parse_tool_calls(content if isinstance(content, str) else "", names)]


def writes_calls_as_text(local: str) -> bool:
    """Whether a bundled model (its catalogue name or alias; '' for any other) writes its calls as text."""
    from vak_context.providers.local.catalogue import local_protocol

    return bool(local) and local_protocol(local) == "inline_fence"


async def ask_direct(entry: SingleEntry, history: History, target: Target, client: httpx.AsyncClient, *,
                     max_tokens: int = 512, text_calls: bool = False) -> Asked:
    """The history and the question in one request, the entry's functions the only tools (module docstring)."""
    run, started = Asked(entry.id, entry.category, history.k, "direct", history_tokens=history.tokens), time.monotonic()
    body = {"model": target.model, "messages": [*history.messages, *entry.question], "tools": list(entry.tools),
            "temperature": 0.0, "max_tokens": max_tokens}
    status, data, sent = await post(client, f"{target.base_url}/chat/completions", body, target.headers)
    run.sent.append(sent)
    if status != 200:
        run.verdict = Verdict(False, f"http {status}")
    else:
        names = [t["function"]["name"] for t in entry.tools]
        run.verdict = check(entry, reply_calls(data["choices"][0]["message"], names, text_calls=text_calls))
    run.seconds = time.monotonic() - started
    return run


def entry_tools(entry: SingleEntry) -> list[Any]:
    """The entry's functions as the caller's tools (offered in every request; the caller's loop hands their
    calls back, so the registration never runs them)."""
    import vak_context

    def caller_runs(**arguments: Any) -> str:
        raise RuntimeError("a BFCL function is answered by the harness, not run by the engine")

    return [vak_context.tool(caller_runs, name=t["function"]["name"], description=t["function"]["description"],
                             schema=t["function"]["parameters"]) for t in entry.tools]


def write_history(folder: Path, history: History, recording: Any, probe: Sequence[Any] = ()) -> None:
    """A fresh ledger at ``folder``: the probe's profile (session "capacity", as ``vak probe --ledger``
    records it) and the history imported as the session :data:`SESSION`."""
    from vak_context.importers import Recording, import_recording
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(folder) as store:
        if probe:
            store.append("capacity", list(probe))
        if history.events:
            import_recording(store, Recording(recording.name, recording.format, list(history.events),
                                              source=dict(recording.source)), SESSION)


async def ask_engine(entry: SingleEntry, history: History, recording: Any, target: Target,
                     client: httpx.AsyncClient, folder: Path, *, window: int, horizon: int | None = None,
                     probe: Sequence[Any] = (), max_tokens: int = 512, text_calls: bool = False) -> Asked:
    """The question as the next turn of the imported history's session, through the caller's loop."""
    import vak_context

    run, started = Asked(entry.id, entry.category, history.k, "engine", history_tokens=history.tokens), time.monotonic()
    write_history(folder, history, recording, probe)
    calls: list[tuple[str, Any]] = []
    try:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session(SESSION, model=target.spec, base_url=target.base_url, api_key=target.api_key,
                                      http_client=client, tools=entry_tools(entry), window=window,
                                      horizon=horizon, max_steps=MAX_STEPS, max_tokens=max_tokens,
                                      calls="text" if text_calls else "native") as session:
                async with session.begin(entry.text) as turn:
                    while not calls and len(run.sent) < MAX_STEPS and (request := await turn.request()) is not None:
                        status, data, sent = await post(client, request.url, request.body,
                                                         {**target.headers, **request.headers})
                        run.sent.append(sent)
                        action = await turn.reply(data, status=status)
                        calls = [(c.name, dict(c.arguments)) for c in action.calls]
                    # leaving the block with the calls unanswered closes the turn cancelled: the ledger is this
                    # entry's alone
        run.verdict = check(entry, calls) if calls else Verdict(False, NO_REPLY)
    except VakError as exc:  # the provider's error after the engine's own retry
        run.verdict = Verdict(False, f"{type(exc).__name__}")
    run.seconds = time.monotonic() - started
    return run


async def run_sizes(entries: Sequence[SingleEntry], sizes: Sequence[int], recording: Any, target: Target,
                    client: httpx.AsyncClient, work: Path, *, modes: Sequence[str] = MODES, window: int,
                    horizon: int | None = None, probe: Sequence[Any] = (), max_tokens: int = 512,
                    text_calls: bool = False, on_asked: Callable[[Asked], None] | None = None) -> list[Asked]:
    """Every entry after the history cut at each size, in each mode (engine: a fresh ledger each under ``work``)."""
    unknown = set(modes) - set(MODES)
    if unknown:
        raise InvalidInput(f"modes {sorted(unknown)}: use {', '.join(MODES)}")
    out: list[Asked] = []
    for k in sizes:
        history = cut(recording, k)
        for n, entry in enumerate(entries):
            for mode in modes:
                if mode == "direct":
                    run = await ask_direct(entry, history, target, client, max_tokens=max_tokens,
                                           text_calls=text_calls)
                else:
                    run = await ask_engine(entry, history, recording, target, client, work / f"k{k}-{n}-{entry.id}",
                                           window=window, horizon=horizon, probe=probe, max_tokens=max_tokens,
                                           text_calls=text_calls)
                out.append(run)
                if on_asked is not None:
                    on_asked(run)
    return out


# ---------------------------------------------------------------- figures


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of ``passed`` out of ``n``."""
    if n == 0:
        return 0.0, 1.0
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def cell(runs: Sequence[Asked]) -> str:
    passed, n = sum(r.verdict.valid for r in runs), len(runs)
    if not n:
        return "-"
    lo, hi = wilson(passed, n)
    return f"{passed}/{n} {passed / n:.0%} [{lo:.0%},{hi:.0%}]"


RATIO_BANDS = ((0.0, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.25), (1.25, float("inf")))


def band(ratio: float) -> str:
    lo, hi = next(b for b in RATIO_BANDS if b[0] <= ratio < b[1])
    return f"{lo:.2f}-{hi:.2f}" if hi != float("inf") else f">={lo:.2f}"


def table(runs: Sequence[Asked], horizon: int | None, window: int, *, probe_line: str = "") -> str:
    """Accuracy per K and mode (Wilson 95%), by request size, and by request size over the horizon; the
    goals (the engine at the largest K within 10 points of its K = 0; above direct wherever direct's
    requests exceed the horizon)."""
    lines = []
    if probe_line:
        lines.append(probe_line)
    if horizon is None:
        lines.append("horizon: not measured (no probe): the size-over-horizon table is left out")
    elif horizon >= window:
        lines.append(f"horizon {horizon:,} tokens is at or above the window {window:,}: this model cannot show "
                     "the effect at this window (no request the engine shortens is past what the model follows)")
    modes = [m for m in MODES if any(r.mode == m for r in runs)]
    sizes = sorted({r.k for r in runs})
    head = f"{'K':>6} {'history':>8} " + " ".join(f"{m + ' acc [95%]':<24} {m[:3] + ' tok':>8}" for m in modes)
    lines += ["accuracy by history size K (tokens, stated count) and mode; tok: mean size of the checked request",
              head, "-" * len(head)]
    for k in sizes:
        at = [r for r in runs if r.k == k]
        parts = []
        for m in modes:
            mine = [r for r in at if r.mode == m]
            sized = [r.size for r in mine if r.size]  # a request the server refused has no count
            mean = sum(sized) / len(sized) if sized else 0
            parts.append(f"{cell(mine):<24} {mean:>8,.0f}")
        lines.append(f"{k:>6,} {max((r.history_tokens for r in at), default=0):>8,} " + " ".join(parts))
    counted = [r for r in runs if r.size]
    bands = sorted({_size_band(r.size) for r in counted})
    lines += ["", "accuracy by request size (prompt tokens of the checked request, as the server counted)"]
    for b in bands:
        lines.append(f"  {b[1]:<14} " + "  ".join(f"{m}: {cell([r for r in counted if r.mode == m and _size_band(r.size) == b]):<22}"
                                               for m in modes))
    refused = [r for r in runs if not r.size]
    if refused:  # e.g. over the server's context: no count came back, so no size band holds them
        lines.append(f"  {'refused':<14} " + "  ".join(f"{m}: {cell([r for r in refused if r.mode == m]):<22}"
                                                    for m in modes)
                     + "  (the server refused the request before counting it: " + ", ".join(
                         sorted({r.verdict.error_type for r in refused})) + ")")
    if horizon:
        lines += ["", f"accuracy by request size over the measured horizon ({horizon:,} tokens)"]
        for lo, hi in RATIO_BANDS:
            mine = [r for r in counted if lo <= r.size / horizon < hi]
            if mine:
                lines.append(f"  {band(lo):<14} " + "  ".join(f"{m}: {cell([r for r in mine if r.mode == m]):<22}"
                                                          for m in modes))
    lines += [f"goal {g}" for g in goals(runs, horizon)]
    return "\n".join(lines)


SIZE_STEP = 2_000


def _size_band(size: int) -> tuple[int, str]:
    lo = size // SIZE_STEP * SIZE_STEP
    return lo, f"{lo:,}-{lo + SIZE_STEP - 1:,}"


def goals(runs: Sequence[Asked], horizon: int | None) -> list[str]:
    out = []
    engine = [r for r in runs if r.mode == "engine"]
    sizes = sorted({r.k for r in engine})
    if len(sizes) > 1:
        def acc(k: int) -> float:
            mine = [r for r in engine if r.k == k]
            return sum(r.verdict.valid for r in mine) / len(mine)

        first, last = acc(sizes[0]), acc(sizes[-1])
        out.append(f"engine at K={sizes[-1]:,} within 10 points of K={sizes[0]:,}: "
                   f"{'met' if first - last <= 0.10 else 'NOT met'} ({last:.0%} vs {first:.0%})")
    if horizon:
        for k in sorted({r.k for r in runs}):
            direct = [r for r in runs if r.mode == "direct" and r.k == k]
            mine = [r for r in engine if r.k == k]
            if direct and mine and any(r.size > horizon or not r.size for r in direct):
                d = sum(r.verdict.valid for r in direct) / len(direct)
                e = sum(r.verdict.valid for r in mine) / len(mine)
                out.append(f"K={k:,}: direct's requests exceed the horizon; engine above direct: "
                           f"{'met' if e > d else 'NOT met'} ({e:.0%} vs {d:.0%})")
    return out


def dump(runs: Sequence[Asked]) -> str:
    """Every asked entry as JSON lines (what the table is computed from)."""
    return "\n".join(json.dumps({"entry": r.entry_id, "category": r.category, "k": r.k, "mode": r.mode,
                                 "passed": r.verdict.valid, "error": r.verdict.error_type, "history": r.history_tokens,
                                 "sent": [s.prompt_tokens for s in r.sent], "seconds": round(r.seconds, 3)})
                     for r in runs)


def load(lines: Sequence[str]) -> list[Asked]:
    out = []
    for line in lines:
        x = json.loads(line)
        out.append(Asked(x["entry"], x["category"], x["k"], x["mode"], Verdict(x["passed"], x["error"]),
                         [Sent(200, t, 0, False) for t in x["sent"]], x["history"], x.get("seconds", 0.0)))
    return out
