"""Real agents from the package index, each run on a task against an OpenAI-speaking endpoint (issue 33,
item 6): direct against the upstream, through ``vak serve``, or through the engine's adapter for the
framework. Each agent is set up as its own documentation does:

- mini-swe-agent 2.4.6: ``DefaultAgent`` with its own ``mini.yaml`` (agent, model and environment sections),
  ``LitellmModel("openai/<model>", api_base=...)``, ``LocalEnvironment`` in the task's scratch repository;
- smolagents 1.26.0: ``ToolCallingAgent`` with ``OpenAIServerModel(api_base=...)``, a conversation is
  ``run(question, reset=False)`` after the first;
- pydantic-ai: ``Agent(OpenAIChatModel(..., OpenAIProvider(openai_client=...)))``, ``message_history``;
- the OpenAI Agents SDK: ``Agent`` over ``OpenAIChatCompletionsModel``, the next input ``to_input_list()``;
- LangChain v1: ``create_agent(ChatOpenAI(base_url=...))``, the last state's messages.

The agent reaches its endpoint through a ``Tap`` (a loopback proxy, tests/fakes/httpserver.py) that keeps
every reply the agent received, so a test can tell whether any text not the upstream's reached it.
Clients keep no idle connection (a pooled socket closed by the garbage collector is a ResourceWarning,
an error under the suite's filterwarnings).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.agent_tasks import TOOLS, scratch_repo, tests_pass
from tests.fakes.agent_upstream import BugTask, QuestionTask, Reply
from tests.fakes.httpserver import serve

AGENTS = ("mini-swe-agent", "smolagents", "pydantic-ai", "openai-agents", "langchain")
ADAPTED = ("pydantic-ai", "openai-agents", "langchain")  # the agents the engine has an adapter for
NO_KEEPALIVE: Any = httpx.Limits(max_keepalive_connections=0)  # openai 3 builds on httpx2, which takes it too


def quiet_environment() -> None:
    """What the agents' libraries read at import or call time, set so nothing leaves loopback: litellm's
    bundled cost map (no fetch), no Agents SDK tracing upload, mini-swe-agent's retries off (a failed
    request fails the step at once instead of backing off for minutes)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    os.environ.setdefault("MSWEA_CONFIGURED", "true")  # no first-run setup prompt
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@dataclass
class Tap:
    """A loopback proxy in front of ``target`` (a server's root URL): every chat request body it passed on
    and every reply that came back, in order (``take`` hands them over and starts afresh)."""

    target: str
    # Sampling fields put in each chat request body that has none of its own (a bench's setting, e.g.
    # temperature 0 so direct and through-the-engine runs differ by what the model is sent, not by chance).
    sampling: dict[str, Any] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    received: list[Reply] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # One client for the Tap's life (closed by ``tapped``): a new httpx.Client per request built a TLS
    # context each time (about 70 ms of CPU, twice per request through vak serve). No connection is kept
    # between requests, as before: each request opens its own.
    _client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=1_800, limits=NO_KEEPALIVE))

    def handle(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        content = request.content
        if self.sampling and request.url.path.endswith("/chat/completions"):
            body = json.loads(content)
            content = json.dumps({**body, **{k: v for k, v in self.sampling.items() if k not in body}}).encode()
        answer = self._client.request(request.method, f"{self.target}{request.url.path}", content=content,
                                      headers=headers)
        kind = answer.headers.get("content-type", "")
        if request.url.path.endswith("/chat/completions"):
            with self._lock:
                self.bodies.append(json.loads(content))
                if answer.status_code == 200:
                    self.received.append(_reply_of(answer.text, kind))
        return httpx.Response(answer.status_code, content=answer.content,
                              headers={"content-type": kind or "application/json"})

    def take(self) -> tuple[list[dict[str, Any]], list[Reply]]:
        with self._lock:
            taken = (self.bodies, self.received)
            self.bodies, self.received = [], []
        return taken


def _reply_of(text: str, kind: str) -> Reply:
    if not kind.startswith("text/event-stream"):
        message = json.loads(text)["choices"][0]["message"]
        calls = [(c["function"]["name"], _arguments(c["function"]["arguments"]))
                 for c in message.get("tool_calls") or ()]
        return Reply(message.get("content") or "", calls)
    said, parts = "", {}  # type: str, dict[int, list[str]]
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices") or ():
            delta = choice.get("delta") or {}
            said += delta.get("content") or ""
            for d in delta.get("tool_calls") or ():
                part = parts.setdefault(d["index"], ["", ""])
                part[0] += (d.get("function") or {}).get("name") or ""
                part[1] += (d.get("function") or {}).get("arguments") or ""
    return Reply(said, [(n, _arguments(a)) for n, a in parts.values()])


def _arguments(raw: str | None) -> dict[str, Any]:
    """A call's arguments as the agent got them: a small model cut off by its token cap sends JSON that does
    not parse (SmolLM2 did), which the agent has to handle, not the tap: kept as text under ``(unparsed)``."""
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"(unparsed)": raw}
    return parsed if isinstance(parsed, dict) else {"(unparsed)": raw}


@contextmanager
def tapped(target: str, sampling: dict[str, Any] | None = None) -> Iterator[tuple[Tap, str]]:
    """A Tap in front of ``target`` (a root URL); yields it and its root URL. ``sampling``: fields each chat
    request gets where it sets none (:attr:`Tap.sampling`)."""
    tap = Tap(target.rstrip("/"), dict(sampling or {}))
    with tap._client, serve(tap.handle) as server:
        yield tap, server.url


@dataclass(frozen=True)
class Endpoint:
    """Where an agent sends its requests: ``base_url`` (an OpenAI /v1) and its key; ``max_tokens`` for a
    real model (a direct client without it lets a small model run on)."""

    base_url: str
    api_key: str
    model: str = "scripted"
    max_tokens: int | None = None
    # The model writes its calls as text (the bundled Qwen): an agent that has a documented text-based
    # configuration runs it (mini-swe-agent's mini_textbased.yaml, its bash commands in fenced blocks).
    text_actions: bool = False


@dataclass(frozen=True)
class Adapter:
    """The engine's adapter for a framework: the engine, the session's name, and the upstream the session
    is bound to (its summaries go there)."""

    engine: Any
    name: str
    upstream: str  # an OpenAI /v1 base URL
    api_key: str  # the upstream's
    window: int = 32_768


@dataclass
class Ran:
    """One task's run: each turn's final answer (mini-swe-agent: its exit status), and the adapter's turn
    outcomes where one was used."""

    answers: list[str]
    solved: bool
    outcomes: list[str] = field(default_factory=list)
    error: str = ""
    wall_s: float = 0.0


def run(agent: str, task: QuestionTask | BugTask, endpoint: Endpoint, *, scratch: Path,
        adapter: Adapter | None = None) -> Ran:
    """Run ``agent`` on ``task`` against ``endpoint`` (through ``adapter`` where given)."""
    quiet_environment()
    started = time.monotonic()
    try:
        if agent == "mini-swe-agent":
            assert isinstance(task, BugTask) and adapter is None
            ran = _mini(task, endpoint, scratch)
        else:
            assert isinstance(task, QuestionTask)
            if agent == "smolagents":
                assert adapter is None
                answers, outcomes = _smol(task, endpoint), []
            else:
                runner: Callable[..., Any] = {"pydantic-ai": _pydantic, "openai-agents": _agents_sdk,
                                              "langchain": _langchain}[agent]
                answers, outcomes = asyncio.run(runner(task, endpoint, adapter))
            ran = Ran(answers, answers == list(task.expected), outcomes)
    except Exception as exc:  # a task that fails is a figure, not a crash: the test compares the outcomes
        ran = Ran([], False, error=f"{type(exc).__name__}: {exc}"[:2000])
    ran.wall_s = time.monotonic() - started
    return ran


def warm(agent: str) -> None:
    """Import the agent's libraries (seconds each, the first time), so no task's wall time holds them."""
    quiet_environment()
    modules = {"mini-swe-agent": ("litellm", "minisweagent.agents.default", "minisweagent.models.litellm_model"),
               "smolagents": ("smolagents",), "pydantic-ai": ("pydantic_ai", "pydantic_ai.models.openai"),
               "openai-agents": ("agents",), "langchain": ("langchain.agents", "langchain_openai")}[agent]
    for name in modules:
        importlib.import_module(name)


# ------------------------------------------------------------------ mini-swe-agent


def _mini(task: BugTask, endpoint: Endpoint, scratch: Path) -> Ran:
    import litellm
    import minisweagent
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    litellm.suppress_debug_info = True  # no "Provider List" banner for a model its cost map does not know
    name = "mini_textbased.yaml" if endpoint.text_actions else "mini.yaml"
    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / name).read_text())
    model_config = dict(config.get("model") or {})
    kwargs = {**model_config.pop("model_kwargs", {}), "api_base": endpoint.base_url, "api_key": endpoint.api_key}
    if endpoint.max_tokens:
        kwargs["max_tokens"] = endpoint.max_tokens
    model_class = LitellmTextbasedModel if endpoint.text_actions else LitellmModel
    model = model_class(model_name=f"openai/{endpoint.model}", model_kwargs=kwargs, cost_tracking="ignore_errors",
                        **model_config)
    folder = scratch_repo(task, scratch)
    env_vars = {**(config.get("environment") or {}).get("env", {}),
                "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    environment = LocalEnvironment(cwd=str(folder), env=env_vars)
    agent_config = {k: v for k, v in (config.get("agent") or {}).items() if k != "mode"}
    agent = DefaultAgent(model, environment, **{**agent_config, "step_limit": 10})
    # litellm runs its service hooks on the thread's current event loop, and asyncio.get_event_loop() makes
    # (and never closes) one where none is set: the agent runs with a loop of ours, closed after.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        result = agent.run(task.issue)
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    status = str(result.get("exit_status", ""))
    return Ran([status], status == "Submitted" and tests_pass(task, folder))


# ------------------------------------------------------------------ smolagents


def _smol_tools() -> list[Any]:
    from smolagents import Tool

    def make(name: str, fn: Callable[[str], str], param: str, about: str) -> Any:
        class Wrapped(Tool):
            skip_forward_signature_validation = True

            def forward(self, **arguments: Any) -> str:
                return fn(str(arguments[param]))

        Wrapped.name, Wrapped.description = name, fn.__doc__ or name
        Wrapped.inputs = {param: {"type": "string", "description": about}}
        Wrapped.output_type = "string"
        return Wrapped()

    return [make(name, fn, param, about) for name, (fn, param, about) in TOOLS.items()]


def _smol(task: QuestionTask, endpoint: Endpoint) -> list[str]:
    import openai
    from smolagents import OpenAIServerModel, ToolCallingAgent

    http = openai.DefaultHttpxClient(limits=NO_KEEPALIVE)
    extra = {"max_tokens": endpoint.max_tokens} if endpoint.max_tokens else {}
    model = OpenAIServerModel(endpoint.model, api_base=endpoint.base_url, api_key=endpoint.api_key,
                              client_kwargs={"http_client": http}, **extra)
    agent = ToolCallingAgent(tools=_smol_tools(), model=model, max_steps=6, verbosity_level=-1)
    try:
        return [str(agent.run(turn.question, reset=i == 0)) for i, turn in enumerate(task.turns)]
    finally:
        http.close()


# ------------------------------------------------------------------ pydantic-ai


async def _pydantic(task: QuestionTask, endpoint: Endpoint, adapter: Adapter | None) -> tuple[list[str], list[str]]:
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                http_client=openai.DefaultAsyncHttpxClient(limits=NO_KEEPALIVE))
    model = OpenAIChatModel(endpoint.model, provider=OpenAIProvider(openai_client=client))
    tools = [fn for fn, _, _ in TOOLS.values()]
    settings: Any = {"max_tokens": endpoint.max_tokens} if endpoint.max_tokens else None
    vak = None
    if adapter is None:
        agent: Any = Agent(model, tools=tools, model_settings=settings)
    else:
        from vak_context.adapters.pydantic_ai import VakHistory

        vak = VakHistory(adapter.engine, adapter.name, model=f"openai-compat:{endpoint.model}", base_url=adapter.upstream,
                         api_key=adapter.api_key, window=adapter.window)
        agent = Agent(model, tools=tools, capabilities=[vak.capability()], toolsets=[vak.toolset()],
                      model_settings=settings)
    answers: list[str] = []
    history: list[Any] = []
    try:
        for turn in task.turns:
            result = await agent.run(turn.question, message_history=history)
            history = result.all_messages()
            answers.append(str(result.output))
        if vak is not None:
            await vak.settle(history)
    finally:
        if vak is not None:
            await vak.close()
        await client.close()
    return answers, [r.outcome for r in vak.results] if vak is not None else []


# ------------------------------------------------------------------ the OpenAI Agents SDK


async def _agents_sdk(task: QuestionTask, endpoint: Endpoint, adapter: Adapter | None) -> tuple[list[str], list[str]]:
    import openai
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool

    client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                http_client=openai.DefaultAsyncHttpxClient(limits=NO_KEEPALIVE))
    tools: list[Any] = [function_tool(fn) for fn, _, _ in TOOLS.values()]
    vak = None
    config = RunConfig(tracing_disabled=True)
    if adapter is not None:
        from vak_context.adapters.openai_agents import VakAgents

        vak = VakAgents(adapter.engine, adapter.name, model=f"openai-compat:{endpoint.model}", base_url=adapter.upstream,
                        api_key=adapter.api_key, window=adapter.window)
        tools += vak.tools()
        config = RunConfig(tracing_disabled=True, call_model_input_filter=vak.input_filter)
    agent = Agent(name="assistant", instructions="Answer the user's question with the tools.", tools=tools,
                  model=OpenAIChatCompletionsModel(model=endpoint.model, openai_client=client),
                  model_settings=ModelSettings(max_tokens=endpoint.max_tokens))
    answers: list[str] = []
    items: list[Any] = []
    try:
        for turn in task.turns:
            if vak is not None:
                result = await Runner.run(agent, turn.question, session=vak.session, run_config=config)
            else:
                result = await Runner.run(agent, [*items, {"role": "user", "content": turn.question}],
                                          run_config=config)
                items = result.to_input_list()
            answers.append(str(result.final_output))
    finally:
        if vak is not None:
            await vak.close()
        await client.close()
    return answers, [r.outcome for r in vak.results] if vak is not None else []


# ------------------------------------------------------------------ LangChain


async def _langchain(task: QuestionTask, endpoint: Endpoint, adapter: Adapter | None) -> tuple[list[str], list[str]]:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    http = httpx.AsyncClient(limits=NO_KEEPALIVE, timeout=600)
    extra = {"max_tokens": endpoint.max_tokens} if endpoint.max_tokens else {}
    model = ChatOpenAI(model=endpoint.model, base_url=endpoint.base_url, api_key=endpoint.api_key,
                       http_async_client=http, **extra)
    tools = [tool(fn) for fn, _, _ in TOOLS.values()]
    vak = None
    middleware: list[Any] = []
    if adapter is not None:
        from vak_context.adapters.langchain import VakMiddleware

        vak = VakMiddleware(adapter.engine, adapter.name, model=f"openai-compat:{endpoint.model}", base_url=adapter.upstream,
                            api_key=adapter.api_key, window=adapter.window)
        middleware = [vak]
    agent = create_agent(model, tools=tools, middleware=middleware)
    answers: list[str] = []
    messages: list[Any] = []
    try:
        for turn in task.turns:
            state = await agent.ainvoke({"messages": [*messages, HumanMessage(turn.question)]})
            messages = state["messages"]
            answers.append(str(messages[-1].content))
    finally:
        if vak is not None:
            await vak.close()
        await http.aclose()
    return answers, [r.outcome for r in vak.results] if vak is not None else []
