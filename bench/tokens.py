"""How far ``chars × tokens_per_char`` is from the real token count, per result shape, on the real server.

The planner sizes requests as ``request_chars × tokens_per_char``: a prior (0.25, or 0.27 as the Qwen
probe measured) until receipts calibrate it. llama.cpp can size a request exactly
(``providers/tokencount.py``: ``/apply-template`` then ``/tokenize``). This bench measures, for each
bundled model, one step request per result shape (the step a tool result of that shape makes: system
prompt, directive, the tool call, its result, the workspace tool schemas):

* the exact count, and the ``usage.prompt_tokens`` the server reports when the step is sent
  (``max_tokens`` 1; with a ``--verify-chars`` body, 400 by default, to keep the prefill cheap): the
  two must be equal;
* tokens per char of the whole request, and of the result body alone (the count with the body minus
  the count with an empty body, over the body's chars): what the shape itself costs;
* the estimate over the exact count at the 0.25 and 0.27 priors, and calibrated: every row's receipt
  goes through ``apply_feedback`` in table order (the EWMA a live session runs, first receipt
  replacing the prior). ``@prev`` is the value the profile held when that step was planned (the
  receipts before it: what a session without an exact count would have sent); ``@calib`` the value
  after every receipt of the run. Both are the error that remains where no exact count is available.

    .venv/bin/python bench/tokens.py                          # smollm2 and qwen, 6,000-char bodies
    .venv/bin/python bench/tokens.py --models smollm2 --chars 2000 --verify-chars 0   # nothing sent
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS  # noqa: E402
from vak_context.context.capacity.profile import (  # noqa: E402
    CapacityProfile,
    Ewma,
    Horizon,
    ProfileKey,
    TurnFeedback,
    apply_feedback,
    request_chars,
)
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR  # noqa: E402
from vak_context.context.request.messages import ChatRequest, Message  # noqa: E402
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock  # noqa: E402
from vak_context.events.payloads import Usage  # noqa: E402
from vak_context.providers.base import RetryPolicy  # noqa: E402
from vak_context.providers.openai_compat import OpenAICompatProvider  # noqa: E402
from vak_context.providers.tokencount import LlamaCppTokenCounter  # noqa: E402

PRIORS = (PRIOR_TOKENS_PER_CHAR, 0.27)
SYSTEM = (
    "You are a coding assistant working in the user's repository. Use the tools to read files and "
    "list folders; answer from what they return, and say which file each fact came from."
)

# ------------------------------------------------------------------ result bodies, one per shape


def _clip(text: str, n: int) -> str:
    """``text`` repeated to at least ``n`` chars, then cut at the last line break before ``n``."""
    while len(text) < n:
        text += "\n" + text
    cut = text.rfind("\n", 0, n)
    return text[: cut if cut > n // 2 else n]


def prose(n: int) -> str:
    return _clip((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"), n)


def code(n: int) -> str:
    return _clip((ROOT / "providers" / "base.py").read_text(encoding="utf-8"), n)


def json_records(n: int) -> str:
    rng = random.Random(7)
    rows = [
        {
            "id": f"evt_{rng.getrandbits(48):012x}",
            "path": f"src/{rng.choice(['api', 'core', 'db', 'ui'])}/{rng.choice(['user', 'order', 'cart'])}_{i}.py",
            "size": rng.randint(120, 90_000),
            "modified": f"2026-11-{rng.randint(1, 30):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            "ok": rng.random() > 0.2,
            "tags": rng.sample(["hot", "legacy", "test", "generated", "vendored"], 2),
            "score": round(rng.random(), 4),
        }
        for i in range(400)
    ]
    return _clip(json.dumps(rows, indent=2), n)


def csv_table(n: int) -> str:
    rng = random.Random(11)
    lines = ["date,region,product,units,unit_price,revenue,returned"]
    for _ in range(600):
        units, price = rng.randint(1, 500), round(rng.uniform(2, 400), 2)
        lines.append(f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d},"
                     f"{rng.choice(['north', 'south', 'east', 'west'])},{rng.choice(['widget', 'gadget', 'gizmo'])}-"
                     f"{rng.randint(100, 999)},{units},{price},{units * price:.2f},{rng.randint(0, 9)}")
    return _clip("\n".join(lines), n)


def logs(n: int) -> str:
    rng = random.Random(13)
    lines = []
    for i in range(600):
        level = rng.choice(["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"])
        lines.append(
            f"2026-11-30T13:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randint(0, 999):03d}Z {level:<5} "
            f"[worker-{rng.randint(1, 8)}] req={rng.getrandbits(32):08x} "
            f"POST /v1/chat/completions status={rng.choice([200, 200, 200, 400, 429, 503])} "
            f"latency_ms={rng.uniform(5, 4000):.1f} tokens={rng.randint(10, 8000)}"
        )
    return _clip("\n".join(lines), n)


def listing(n: int) -> str:
    lines = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in {"__pycache__", "node_modules"}
                         and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(folder) / name
            stat = path.stat()
            stamp = time.strftime("%b %d %H:%M", time.gmtime(stat.st_mtime))
            lines.append(f"-rw-r--r-- 1 dev dev {stat.st_size:>8} {stamp} {path.relative_to(ROOT)}")
    return _clip("\n".join(lines), n)


SHAPES: dict[str, Callable[[int], str]] = {
    "prose": prose,
    "code": code,
    "json": json_records,
    "csv": csv_table,
    "logs": logs,
    "listing": listing,
}
CALLS: dict[str, tuple[str, dict[str, Any]]] = {  # the call whose result each shape is
    "prose": ("read_file", {"path": "docs/ARCHITECTURE.md"}),
    "code": ("read_file", {"path": "providers/base.py"}),
    "json": ("read_file", {"path": "data/events.json"}),
    "csv": ("read_file", {"path": "data/sales.csv"}),
    "logs": ("grep", {"pattern": "chat/completions", "path": "logs/"}),
    "listing": ("list_dir", {"path": "."}),
}


def step_request(model: str, shape: str, body: str) -> ChatRequest:
    """The request of the step after a tool call returned ``body``."""
    name, args = CALLS[shape]
    return ChatRequest(
        model=model,
        system=SYSTEM,
        messages=(
            Message.user("Look at what the tool returns and tell me the one thing that stands out."),
            Message(role="assistant", content=(ToolUseBlock(id="call_1", name=name, input=args),)),
            Message(role="user", content=(ToolResultBlock(tool_use_id="call_1", content=body),
                                          TextBlock(text="Answer in two sentences."))),
        ),
        tools=tuple(t.spec for t in WORKSPACE_TOOLS),
        max_tokens=1,
        temperature=0.0,
    )


# ------------------------------------------------------------------ measuring


@dataclass
class Row:
    model: str
    shape: str
    body_chars: int
    request_chars: int
    exact: int
    body_tokens: int  # exact minus the same request with an empty body
    usage: tuple[int, int] | None  # (exact count, server's prompt_tokens) of the sent small request
    planned_at: float = 0.0  # the profile's tokens per char when this step was planned (earlier receipts)
    calibrated: float = 0.0  # the profile's tokens per char after every receipt of the run

    @property
    def request_tpc(self) -> float:
        return self.exact / self.request_chars

    @property
    def body_tpc(self) -> float:
        return self.body_tokens / self.body_chars

    def ratio(self, tokens_per_char: float) -> float:
        """The plan's estimate over the exact count (under 1: the plan undercounts)."""
        return math.ceil(self.request_chars * tokens_per_char) / self.exact


def mixed(n: int) -> str:
    """A slice of every shape: a step that carries several results."""
    return "\n\n".join(m(n)[: n // len(SHAPES)] for m in SHAPES.values())


async def measure(model: str, provider: OpenAICompatProvider, *, chars: int, verify_chars: int) -> list[Row]:
    """One row per shape plus the mixed row; the profile is calibrated from each row's receipt in turn.

    With ``verify_chars`` > 0 the same step with a body of that many chars is also sent (``max_tokens``
    1), and the server's ``usage.prompt_tokens`` is compared with the exact count of that request (a
    small body keeps the prefill affordable on a loaded machine; the count does not depend on size).
    The receipts that calibrate the profile carry the exact count of each row's full-size request.
    """
    counter = LlamaCppTokenCounter(provider)
    rows: list[Row] = []
    profile = CapacityProfile(ProfileKey("llama.cpp", model), 8192, Horizon(8192, 0.5, 0.0), Ewma(PRIORS[0], 0), 256)
    for shape in [*SHAPES, "mixed"]:
        make = SHAPES.get(shape, mixed)
        call = "json" if shape == "mixed" else shape
        body = make(chars)
        request = step_request(model, call, body)
        exact = await counter.count(request)
        base = await counter.count(step_request(model, call, ""))
        usage: tuple[int, int] | None = None
        if verify_chars > 0:
            small = step_request(model, call, make(verify_chars))
            usage = (await counter.count(small), (await provider.complete(small)).usage.prompt_tokens)
        rows.append(Row(model, shape, len(body), request_chars(request), exact, exact - base, usage,
                        planned_at=profile.tokens_per_char.value))
        profile = apply_feedback(profile, TurnFeedback(usage=Usage(input_tokens=exact),
                                                       chars_sent=request_chars(request)), now=time.time())
    if counter.exact is not True:
        raise SystemExit(f"{model}: the server has no tokenizer endpoint, so there is no exact count to compare")
    for row in rows:
        row.calibrated = profile.tokens_per_char.value
    return rows


async def run_model(model: str, *, chars: int, verify_chars: int, threads: int) -> list[Row]:
    from vak_context.providers.local.server import LocalModelServer

    n_ctx = max(4096, 2 ** math.ceil(math.log2(chars * 0.6 + 1500)))
    with LocalModelServer(model, n_ctx=n_ctx, threads=threads) as server:
        async with httpx.AsyncClient(trust_env=False) as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url, api_key=server.api_key,
                                            retry=RetryPolicy(attempts=2), timeout_s=900.0)
            return await measure(model, provider, chars=chars, verify_chars=verify_chars)


def table(rows: list[Row]) -> str:
    head = (f"{'model':<10} {'shape':<8} {'body':>6} {'request':>7} {'exact':>6} {'usage':>6} "
            f"{'tok/char':>8} {'body t/c':>8} " + " ".join(f"{'@' + str(p):>6}" for p in PRIORS)
            + f" {'@prev':>13} {'@calib':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        usage = "-" if r.usage is None else ("=" if r.usage[0] == r.usage[1] else f"{r.usage[0]}/{r.usage[1]}")
        lines.append(
            f"{r.model:<10} {r.shape:<8} {r.body_chars:>6} {r.request_chars:>7} {r.exact:>6} {usage:>6} "
            f"{r.request_tpc:>8.3f} {r.body_tpc:>8.3f} " + " ".join(f"{r.ratio(p):>6.2f}" for p in PRIORS)
            + f" {r.ratio(r.planned_at):>6.2f} ({r.planned_at:.3f}) {r.ratio(r.calibrated):>6.2f} ({r.calibrated:.3f})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "qwen"])
    parser.add_argument("--chars", type=int, default=6000, help="chars per result body")
    parser.add_argument("--verify-chars", type=int, default=400,
                        help="body chars of the request sent to check usage.prompt_tokens (0: send nothing)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    rows: list[Row] = []
    for model in args.models:  # each model's rows as soon as they are measured (a slow model may time out)
        start = time.perf_counter()
        own = asyncio.run(run_model(model, chars=args.chars, verify_chars=args.verify_chars, threads=args.threads))
        print(table(own), f"\n# {model}: {time.perf_counter() - start:.0f} s\n", flush=True)
        rows += own
    print(table(rows))
    print("\nratio columns: estimate (ceil(request chars x tokens per char)) / exact count; under 1.00 undercounts.")
    print("usage '=': the server's usage.prompt_tokens equals the exact count for the same (sent) request.")
    for model in args.models:
        own = [r for r in rows if r.model == model and r.shape != "mixed"]
        worst = max(own, key=lambda r: abs(r.ratio(r.calibrated) - 1))
        print(f"{model}: median tokens/char {statistics.median(r.request_tpc for r in own):.3f} "
              f"(body alone {statistics.median(r.body_tpc for r in own):.3f}); calibrated {own[0].calibrated:.3f}; "
              f"worst calibrated error {worst.ratio(worst.calibrated) - 1:+.0%} on {worst.shape}")
    return rows


if __name__ == "__main__":
    main()
