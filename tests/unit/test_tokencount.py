"""Sizing a request exactly before it is sent (providers/tokencount.py) and the assembler's use of it.

Unit tests answer with llama.cpp's documented bodies (``/apply-template`` -> ``{"prompt": ...}``,
``/tokenize`` -> ``{"tokens": [...]}``) through httpx.MockTransport; tests/live/test_tokencount_live.py checks the count
against the ``usage.prompt_tokens`` the real server reports for the same request.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.chat_requests import REQUEST
from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.endpoint import EndpointSpec, build_tools, model_tools
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.steps import StepRequest
from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.context.capacity.profile import (
    CapacityProfile,
    Ewma,
    Horizon,
    ProfileKey,
    request_budget,
    request_chars,
)
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import Tail, render_tail, system_prompt
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.engine.binding import BoundModel, in_process_assembler
from vak_context.events.payloads import Directive
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.tokencount import (
    CharRatioCounter,
    LlamaCppTokenCounter,
    TokenCounter,
    token_counter,
)
from vak_context.storage.ledger import LedgerStore

KEY = "sk-test-0123456789abcdef"
ROOT = "http://127.0.0.1:9"

def template(body: dict[str, Any]) -> str:
    """A stand-in for the server's chat template: every message's text, then the tool schemas."""
    parts = [str(m.get("content") or "") + json.dumps(m.get("tool_calls") or "") for m in body["messages"]]
    return "\n".join(parts) + json.dumps(body.get("tools") or [])


class FakeLlamaServer:
    """llama.cpp's /apply-template and /tokenize (and /v1/chat/completions) with their documented bodies.

    The fake tokenizer makes ``len(prompt) // chars_per_token`` tokens; ``missing`` paths answer 404 the
    way llama.cpp does for a path it does not serve. Every request is kept with its path and headers.
    """

    def __init__(self, chars_per_token: int = 2, missing: tuple[str, ...] = (),
                 replies: dict[str, tuple[int, Any]] | None = None) -> None:
        self.chars_per_token, self.missing, self.replies = chars_per_token, missing, replies or {}
        self.seen: list[tuple[str, dict[str, Any], httpx.Headers]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        self.seen.append((path, body, request.headers))
        if path in self.missing:
            return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found",
                                                       "type": "not_found_error"}})
        if path in self.replies:
            status, out = self.replies[path]
            return httpx.Response(status, json=out)
        if path == "/apply-template":
            return httpx.Response(200, json={"prompt": template(body)})
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(len(body["content"]) // self.chars_per_token))})
        if path == "/v1/chat/completions":  # the prompt as its own tokenizer counts it, as llama.cpp reports
            prompt = len(template(body)) // self.chars_per_token
            return httpx.Response(200, json={
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
            })
        return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found"}})

    def paths(self) -> list[str]:
        return [p for p, _b, _h in self.seen]


def _counter(server: FakeLlamaServer, client: httpx.AsyncClient, root: str = ROOT, **kwargs: Any) -> LlamaCppTokenCounter:
    provider = OpenAICompatProvider(client, base_url=f"{root}/v1", api_key=KEY, retry=RetryPolicy(attempts=1))
    return LlamaCppTokenCounter(provider, **kwargs)


async def test_the_count_is_the_servers_template_then_its_tokenizer_with_the_key() -> None:
    """The adapter's own body goes to /apply-template at the server root (not /v1), the returned prompt to
    /tokenize with the flags the chat endpoint tokenizes with; the count is the number of token ids, and
    both calls carry the API key."""
    server = FakeLlamaServer(chars_per_token=3)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        counter = _counter(server, client)
        assert isinstance(counter, TokenCounter)
        n = await counter.count(REQUEST)
        rendered = counter.provider.render(REQUEST)
    assert server.paths() == ["/apply-template", "/tokenize"]
    (_p1, apply_body, h1), (_p2, tokenize_body, h2) = server.seen
    assert apply_body == rendered
    assert tokenize_body == {"content": template(rendered), "add_special": True, "parse_special": True}
    assert n == len(template(rendered)) // 3
    assert h1["authorization"] == h2["authorization"] == f"Bearer {KEY}"
    assert counter.exact is True and KEY not in repr(counter)


async def test_a_server_without_the_endpoints_falls_back_to_chars_times_tokens_per_char_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """A 404 on /apply-template switches the counter to chars × tokens_per_char (read from the callable at
    every count), says so once in the log and once through on_fallback, and stops asking the server."""
    server = FakeLlamaServer(missing=("/apply-template",))
    notices: list[str] = []
    rate = [0.25]
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        counter = _counter(server, client, root="http://127.0.0.1:10099", fallback=CharRatioCounter(lambda: rate[0]),
                           on_fallback=notices.append)
        with caplog.at_level(logging.WARNING, logger="vak.tokencount"):
            first = await counter.count(REQUEST)
            rate[0] = 0.4  # receipts calibrated the profile
            second = await counter.count(REQUEST)
    chars = request_chars(REQUEST)
    assert first == math.ceil(chars * 0.25) and second == math.ceil(chars * 0.4)
    assert server.paths() == ["/apply-template"]
    assert counter.exact is False and len(notices) == 1 and "HTTP 404" in notices[0]
    assert [r.getMessage() for r in caplog.records if r.name == "vak.tokencount"] == notices


async def test_a_missing_tokenize_endpoint_also_falls_back() -> None:
    """/apply-template served but /tokenize not (404): the fallback, not an error."""
    server = FakeLlamaServer(missing=("/tokenize",))
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        counter = _counter(server, client, fallback=CharRatioCounter(0.5))
        assert await counter.count(REQUEST) == math.ceil(request_chars(REQUEST) * 0.5)
    assert counter.exact is False


def _html(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, text="<html><body>Sign in</body></html>", headers={"content-type": "text/html"})


def _timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def _status(code: int, body: Any) -> Any:
    return lambda request: httpx.Response(code, json=body)


# Every way an exact count can fail: a status (a refused key, a bad request, a server error), a 2xx body
# that is not the count (HTML, other JSON, on either endpoint), a timeout, a dropped connection.
FAILURES: dict[str, tuple[str, Any]] = {
    "401": ("/apply-template", _status(401, {"error": {"code": 401, "message": "Invalid API Key",
                                                       "type": "authentication_error"}})),
    "400": ("/apply-template", _status(400, {"error": {"code": 400, "message": "bad template",
                                                       "type": "invalid_request_error"}})),
    "500": ("/apply-template", _status(500, {"error": {"code": 500, "message": "template crashed"}})),
    "html": ("/apply-template", _html),
    "other json": ("/apply-template", _status(200, {"text": "no prompt field"})),
    "tokens not a list": ("/tokenize", _status(200, {"tokens": 12})),
    "tokenize not an object": ("/tokenize", _status(200, ["not", "an", "object"])),
    "timeout": ("/apply-template", _timeout),
    "connection": ("/apply-template", _refused),
}


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_any_failure_of_the_count_falls_back_to_the_estimate_warned_once_per_endpoint(
        failure: str, caplog: pytest.LogCaptureFixture) -> None:
    """Two sessions' counters on one server whose count fails: each count is chars × tokens_per_char, each
    counter asks the server once and says so once through on_fallback, the log says it once for the
    endpoint, naming the server and the failure, never the key nor a name that is not public."""
    path, answer = FAILURES[failure]
    server = FakeLlamaServer()
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == path:
            seen.append(path)
            return answer(request)
        return server.handle(request)

    root = f"http://127.0.0.1:{10_000 + list(FAILURES).index(failure)}"  # an endpoint of its own: warned once
    notices: list[list[str]] = [[], []]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        counters = [_counter(server, client, root=root, fallback=CharRatioCounter(0.5), on_fallback=n.append)
                    for n in notices]
        with caplog.at_level(logging.DEBUG, logger="vak.tokencount"):
            counts = [await c.count(REQUEST) for c in counters for _ in range(2)]
    assert counts == [math.ceil(request_chars(REQUEST) * 0.5)] * 4
    assert len(seen) == 2 and all(c.exact is False for c in counters)
    assert [len(n) for n in notices] == [1, 1] and notices[0] == notices[1]
    warned = [r for r in caplog.records if r.name == "vak.tokencount"]
    assert [(r.levelname, r.getMessage()) for r in warned] == [("WARNING", notices[0][0])]
    notice = notices[0][0]
    assert notice.startswith(f"{root} ") and "from now on" in notice and KEY not in notice
    assert "CharRatioCounter" not in notice
    if failure.isdigit():
        assert f"HTTP {failure}" in notice


async def test_a_turn_whose_count_is_refused_completes_on_the_estimate(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Through the public API: a server that answers chat but refuses /apply-template (401, a key scoped to
    chat) completes the turn; the request was sized by the estimate and the log says so once."""
    refused = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    server = FakeLlamaServer(replies={"/apply-template": (401, refused)})
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            with caplog.at_level(logging.WARNING, logger="vak.tokencount"):
                async with engine.session("s1", model="openai-compat:m", base_url="http://127.0.0.1:10100/v1",
                                          api_key=KEY, http_client=client, window=8_000, max_steps=2) as session:
                    result = await session.run("What is in the notes?")
    assert (result.outcome, result.answer) == ("completed", "ok")
    assert server.paths().count("/apply-template") == 1 and server.paths().count("/v1/chat/completions") == 1
    [record] = [r for r in caplog.records if r.name == "vak.tokencount"]
    assert "HTTP 401" in record.getMessage() and KEY not in record.getMessage()


async def test_token_counter_is_exact_only_for_a_self_hosted_openai_compatible_server() -> None:
    """A self-hosted OpenAI-compatible adapter (llama.cpp) gets the exact counter; OpenAI's own adapter is
    never asked for an endpoint it does not have and gets the estimate at the rate given."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(FakeLlamaServer().handle)) as client:
        local = OpenAICompatProvider(client, base_url=f"{ROOT}/v1", api_key=KEY)
        hosted = OpenAIChatProvider(client, api_key=KEY)
        exact, estimate = token_counter(local), token_counter(hosted, lambda: 0.5)
        assert isinstance(exact, LlamaCppTokenCounter) and exact.provider is local
        assert isinstance(estimate, CharRatioCounter)
        assert await estimate.count(REQUEST) == math.ceil(request_chars(REQUEST) * 0.5)


# ---------------------------------------------------------------- the assembler's budget check


def _surface() -> Surface:
    core = [ToolDecl(RECALL_TOOL, always_loaded=True)]
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    return Surface.build(core)


async def test_the_assembler_sizes_with_the_exact_count_and_plans_again_when_it_is_over(tmp_path: Path) -> None:
    """History that fits the budget at the profile's 0.25 tokens per char but not at the server's real
    count (the fake tokenizer makes about 0.5 per char): without a counter the request goes out over
    budget; with one, the assembler reports the exact size, plans again at the measured rate, and the
    request it returns fits (fewer older turns shown in full)."""
    server = FakeLlamaServer(chars_per_token=2)
    surface = _surface()
    system = system_prompt(surface.catalogue())
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        provider = OpenAICompatProvider(client, base_url=f"{ROOT}/v1", api_key=KEY, retry=RetryPolicy(attempts=1))
        counter = LlamaCppTokenCounter(provider)
        with LedgerStore(tmp_path / "ledger") as store:
            history = TurnLoop(InProcessServices(store, "s1"), provider, _profile(100_000), TurnConfig(
                model="m", provider="openai-compat", system=system, surface=surface, max_tokens=64),
                clock=lambda: 1_764_504_000.0)
            for i in range(4):
                await history.run(f"turn {i}: " + "please look at the notes and summarise them. " * 60)
            store.append("s1", [Directive(text="and now the last question?")])
            step = StepRequest(model="m", system=system, tools=surface.schemas, max_tokens=64,
                               tail=render_tail(Tail(now=1_764_504_100.0)))
            probe = await AssemblerActor(str(store.root), store).assemble("s1", _profile(100_000), step)
            full_size = await counter.count(probe.request)
            # A budget between the estimate of the whole history and its exact size.
            profile = _profile(horizon=(probe.estimated_tokens + full_size) // 2 + 256)
            budget = request_budget(profile)
            plain = await AssemblerActor(str(store.root), store).assemble("s1", profile, step)
            exact = await AssemblerActor(str(store.root), store, count=counter.count).assemble("s1", profile, step)
            plain_size, exact_size = await counter.count(plain.request), await counter.count(exact.request)
    assert plain.estimated_tokens <= budget < plain_size  # the estimate said it fits; it does not
    assert exact.estimated_tokens == exact_size <= budget
    assert exact.fidelity[Fidelity.FULL] < plain.fidelity[Fidelity.FULL]


def _profile(horizon: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("openai-compat", "m"), 200_000, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 3), 256)


# ---------------------------------------------------------------- bench/tokens.py


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_tokens", Path(__file__).resolve().parents[2] / "bench"
                                                  / "tokens.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


async def test_the_token_bench_measures_every_shape_against_the_exact_count() -> None:
    """bench/tokens.py on the fake server (one token per 2 chars of its template): a row per result shape
    plus the mixed one, each body near the size asked for, usage equal to the exact count, the body's own
    tokens per char near 0.5, and the calibrated rate fed from every receipt (no longer the 0.25 prior)."""
    bench = _bench()
    server = FakeLlamaServer(chars_per_token=2)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        provider = OpenAICompatProvider(client, base_url=f"{ROOT}/v1", api_key=KEY, retry=RetryPolicy(attempts=1))
        rows = await bench.measure("m", provider, chars=1500, verify_chars=300)
    assert [r.shape for r in rows] == [*bench.SHAPES, "mixed"]
    for row in rows:
        assert 750 <= row.body_chars <= 1550 and row.usage is not None and row.usage[0] == row.usage[1]
        assert 0.45 <= row.body_tpc <= 0.55
        assert row.calibrated > 0.3
    assert rows[0].planned_at == 0.25 and rows[1].planned_at > 0.3
    assert "listing" in bench.table(rows)


async def test_one_function_builds_the_bound_models_counter_and_summariser(tmp_path: Path) -> None:
    """``model_tools`` is the one wiring of the counter and the summariser (issue 22): the session's
    in-process assembler and an actor's endpoint tools both count with the server's own tokenizer and
    summarise on the bound model, with the same window and summary cap."""
    server = FakeLlamaServer()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        provider = OpenAICompatProvider(client, base_url=f"{ROOT}/v1", api_key=KEY, retry=RetryPolicy(attempts=1))
        exact = await LlamaCppTokenCounter(provider).count(REQUEST)
        tools = model_tools(provider, "m", window_tokens=4096, tokens_per_char=lambda: 0.25)
        assert await tools.count(REQUEST) == exact
        assert (tools.summariser.provider, tools.summariser.model, tools.summariser.window_tokens,
                tools.summariser.max_summary_tokens) == (provider, "m", 4096, 256)
        with LedgerStore(tmp_path / "ledger") as store:
            bound = BoundModel(provider, "m", "openai-compat", ProfileKey("openai-compat", "m"), None)
            assembler = in_process_assembler(store, "s1", bound, 4096, lambda: 0.25)
            assert assembler.count is not None and await assembler.count(REQUEST) == exact
            assert assembler.summarise is not None
    endpoint = build_tools(EndpointSpec(base_url=f"{ROOT}/v1", model="m", window_tokens=4096, api_key=KEY),
                           lambda: 0.25)
    try:
        assert (endpoint.summariser.model, endpoint.summariser.window_tokens,
                endpoint.summariser.max_summary_tokens) == ("m", 4096, 256)
        assert isinstance(endpoint.summariser.provider, OpenAICompatProvider)
    finally:
        await endpoint.client.aclose()
