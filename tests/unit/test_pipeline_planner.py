"""The pipeline in this process: the AssemblerActor gets its plans from a PlannerActor (the summariser's
holder), every ``plan`` entry names the PlannerActor and still explains; the endpoint takes any provider
spec (and a cheaper summary model); the probe target is built from the bound model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.sessions import ledger_session
from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.local_services import InProcessServices
from vak_context.actors.planner import PRODUCER, PlannerActor
from vak_context.actors.probe import probe_request_for
from vak_context.agent.endpoint import EndpointSpec, build_tools
from vak_context.agent.steps import StepRequest
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ChatRequest, ChatResult
from vak_context.errors import ConfigError, InvalidInput
from vak_context.events.payloads import Directive, PlanRecord, TurnTail
from vak_context.storage.ledger import LedgerStore

KEY = ProfileKey("anthropic", "claude-test")


class Said:
    """A scripted summary model (``complete``), counting its calls."""

    def __init__(self, asked: list[str]) -> None:
        self.asked = asked

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.asked.append(request.model)
        return ChatResult(provider="scripted", model=request.model,
                          text="Earlier: prices, files and logs; nothing is pending.")


def _profile(horizon: int) -> CapacityProfile:
    return CapacityProfile(KEY, 100_000, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 3), 256)


async def test_the_assembler_projects_what_the_planner_plans_and_every_plan_names_it(tmp_path: Path) -> None:
    """Fourteen turns and a small horizon: the first step's plan needs a packet; the planner (not the
    assembler) writes it through its summariser and records the plan entry, which names the PlannerActor
    and explains to the same digests. A later step re-reads the frozen plan: no second plan entry."""
    store, _view = ledger_session(tmp_path / "ledger", 14)
    asked: list[str] = []

    async def summarise(view: SessionView, plan: Plan) -> list[str]:
        return await write_packet(planner.ledger, "s", view, plan, Summariser(Said(asked), "cheap", window_tokens=8192))

    planner = PlannerActor(str(store.root), store, summarise=summarise)
    services = InProcessServices(store, "s", planner=planner)
    assert services.planner is planner and services.assembler.planner is planner
    store.append("s", [Directive(text="And the copper price?"), TurnTail(text="<tail/>")])
    step = StepRequest(model="claude-test", system="You help.", tools=(), tail="<tail/>", max_tokens=64)
    first = await services.assemble(_profile(1400), step)
    again = await services.assemble(_profile(1400), step)
    plans = [(e.id, store.payload(e.id)) for e in store.entries("s") if e.kind == "plan"]
    store.close()
    assert asked == ["cheap"] and first.written and first.fidelity["packet"] > 0, first.fidelity
    assert [pid for pid, _ in plans] == [first.plan_id]
    assert all(isinstance(p, PlanRecord) and p.producer == PRODUCER for _, p in plans)
    assert not again.replanned and again.plan_digest == first.plan_digest and again.request == first.request
    with LedgerStore(tmp_path / "ledger", readonly=True) as reader:
        assert PlannerActor(str(reader.root), reader).explain(plans[0][0])["matches"]


def test_a_summariser_goes_to_the_planner_when_one_is_given(tmp_path: Path) -> None:
    async def summarise(view: SessionView, plan: Plan) -> list[str]:
        return []

    with LedgerStore(tmp_path / "ledger") as store:
        planner = PlannerActor(str(store.root), store)
        with pytest.raises(InvalidInput, match="goes to the planner"):
            AssemblerActor(str(store.root), store, summarise=summarise, planner=planner)
        made = AssemblerActor(str(store.root), store, summarise=summarise)  # makes its own planner with it
        assert isinstance(made.planner, PlannerActor) and made.planner.summarise is summarise
        made.summarise = None  # the engine's live wiring sets it after construction
        assert made.planner.summarise is None


def test_an_endpoint_names_any_provider_and_builds_the_summariser_on_its_summary_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "gm-unit-canary")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-unit-canary")
    cheap = EndpointSpec.of("anthropic:claude-haiku", window_tokens=4096, base_url="http://127.0.0.1:9/v1")
    endpoint = EndpointSpec.of("google:gemini-pro", window_tokens=32_000, summary=cheap)
    assert (endpoint.provider, endpoint.spec) == ("gemini", "gemini:gemini-pro")  # the alias resolved
    assert endpoint.ident != EndpointSpec.of("gemini:gemini-pro", window_tokens=32_000).ident
    assert "canary" not in repr(endpoint) and endpoint.api_key is None
    tools = build_tools(endpoint, lambda: 0.25)
    assert (tools.summariser.model, tools.summariser.window_tokens) == ("claude-haiku", 4096)
    assert type(tools.summariser.provider).__name__ == "AnthropicProvider"
    plain = build_tools(EndpointSpec.of("gemini:gemini-pro", window_tokens=32_000), lambda: 0.25)
    assert (plain.summariser.model, type(plain.summariser.provider).__name__) == ("gemini-pro", "GeminiProvider")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):  # read where the tools are built, never sent
        build_tools(cheap, lambda: 0.25)


def test_the_probe_target_is_the_bound_models_under_the_sessions_key() -> None:
    local = EndpointSpec(base_url="http://127.0.0.1:8080/v1", model="qwen", window_tokens=8192, api_key="loop-key")
    target = probe_request_for(local, ProfileKey("local", "qwen2.5-coder-0.5b", "Q4_K_M"))
    assert target.spec == "openai-compat:qwen" and target.is_local
    assert target.key == ProfileKey("local", "qwen2.5-coder-0.5b", "Q4_K_M")  # what the session binds
    assert target.options == {"api_key": "loop-key"}  # a loopback server's own key, no provider's
    hosted = probe_request_for(EndpointSpec.of("anthropic:claude-test", window_tokens=200_000), KEY)
    assert not hosted.is_local and hosted.options == {} and hosted.key == KEY
