"""The units that send requests to a model: ``probe`` (the capacity ladder) and ``live`` (directives re-run N times).

Both take an ``Endpoint`` (where the model answers and its key): a local model's server as the node's
model-server actor reports it, an OpenAI-compatible endpoint from the spec, or a hosted provider.
Keys stay in the endpoint object; they never go into a row, a log line or a ledger entry.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from vak_context.errors import ConfigError
from vak_context.farm.rows import UnitKey, make_row
from vak_context.farm.spec import LiveTask, ModelEntry, ProbeTask
from vak_context.providers.base import Provider


@dataclass(frozen=True)
class Endpoint:
    """Where a model answers. ``spec`` is the registry spec (``openai-compat:NAME`` or a hosted one)."""

    spec: str
    base_url: str | None
    api_key: str | None = None
    n_ctx: int | None = None
    local_model: str = ""  # the llama.cpp model name, for a local model
    server_pid: int | None = None  # the llama.cpp server's process (units sharing a server show the same)

    def __repr__(self) -> str:  # never the key
        return f"Endpoint({self.spec!r}, {self.base_url!r})"


def endpoint_of(model: ModelEntry, env: dict[str, str] | None = None) -> Endpoint:
    """The endpoint of a model the spec names by address (endpoint, hosted). Local models get theirs from
    the node's model-server actor."""
    env = dict(os.environ) if env is None else env
    if model.kind == "endpoint":
        key = env.get(model.api_key_env) if model.api_key_env else None
        if model.api_key_env and not key:
            raise ConfigError(f"model {model.name!r} reads its key from ${model.api_key_env}, which is not set on "
                              "this node: set it in the job's environment (runtime_env env_vars).")
        return Endpoint(f"openai-compat:{model.model}", model.base_url, key, model.window)
    return Endpoint(model.spec, None, None, model.window)


def provider_for(endpoint: Endpoint, client: httpx.AsyncClient) -> Provider:
    from vak_context.providers.registry import make_provider

    kwargs: dict[str, Any] = {"timeout_s": 900.0}
    if endpoint.api_key is not None:
        kwargs["api_key"] = endpoint.api_key
    if endpoint.base_url:
        kwargs["base_url"] = endpoint.base_url
    provider, _model = make_provider(endpoint.spec, client, **kwargs)
    return provider


# ------------------------------------------------------------------ probe


async def probe_unit(unit: UnitKey, run_id: str, node: str, model: ModelEntry, task: ProbeTask,
                     endpoint: Endpoint) -> list[dict[str, Any]]:
    """One row per rung of the ladder; ``horizon`` is the profile the probe measured."""
    from vak_context.agent.probe import ProbeRunner, ProbeSettings
    from vak_context.context.capacity.profile import ProfileKey
    from vak_context.providers.local.catalogue import local_profile_key, local_protocol

    local = endpoint.local_model
    protocol = task.protocol or (local_protocol(local) if local else "native")
    settings = ProbeSettings(samples=task.samples, controls=task.controls, first_rung=task.first_rung,
                             max_sizes=task.max_sizes, protocol=protocol, window=task.window,
                             cache_rung=task.cache_rung, max_tokens=task.max_tokens, second_look=False)
    # A local model is keyed under the spec's own name for it, with the catalogue's quantisation.
    key = local_profile_key(local, name=model.name) if local else ProfileKey(model.provider, model.name)
    started = time.perf_counter()
    async with httpx.AsyncClient(trust_env=False) as client:
        report = await ProbeRunner(provider_for(endpoint, client), key, settings=settings).run()
    wall = (time.perf_counter() - started) * 1000
    profile = report.profile
    outcomes = sorted(report.ladder.outcomes, key=lambda o: o.target)
    rows = []
    for n, o in enumerate(outcomes):
        latencies = [s.latency_ms for s in o.samples if s.latency_ms]
        verdict = "" if o.passed else ("over the window" if o.overflow else
                                       f"followed {o.followed}/{len(o.instructions)}, "
                                       f"control called {o.control_calls}/{len(o.controls)}")
        rows.append(make_row(
            unit, "probe", run_id, n, passed=o.passed, reason=verdict, node=node,
            horizon=profile.instruction_horizon.tokens, window=profile.declared_window, budget=task.window,
            request_tokens=o.prompt_tokens or o.target, cache_tokens=sum(s.cached_tokens for s in o.samples),
            wall_ms=sum(latencies) if latencies else None,
            detail={"target": o.target, "followed": o.followed, "asked": len(o.instructions),
                    "control_calls": o.control_calls, "controls": len(o.controls), "protocol": protocol,
                    "confidence": profile.instruction_horizon.confidence, "probe_ms": round(wall, 1),
                    "requests": report.requests, "server_pid": endpoint.server_pid},
        ))
    if not rows:
        rows.append(make_row(unit, "probe", run_id, 0, passed=False, node=node, reason="the ladder ran no rung",
                             horizon=profile.instruction_horizon.tokens, window=profile.declared_window,
                             wall_ms=wall))
    return rows


# ------------------------------------------------------------------ live


def live_outcome(expect: str, report: Any) -> tuple[bool, str]:
    """Did one live turn show what the task expects? (passed, what it showed instead)."""
    calls = [c for step in report.steps for c in step.calls]
    if expect == "card":
        ok = any(c.startswith("emit_") and c.endswith("_card") for c in calls)
        return ok, "" if ok else f"no card emitted (calls: {calls or 'none'}, outcome {report.outcome})"
    if expect == "tool_call":
        return bool(calls), "" if calls else f"no tool call (outcome {report.outcome})"
    ok = bool(report.answer.strip()) and report.outcome not in ("failed", "degraded")
    return ok, "" if ok else f"no answer (outcome {report.outcome})"


async def live_unit(unit: UnitKey, run_id: str, node: str, model: ModelEntry, task: LiveTask, endpoint: Endpoint,
                    *, source_root: Path, source_head: str, work: Path) -> list[dict[str, Any]]:
    """Each directive run ``task.repeats`` times, each time from the same history (a fork of the session's
    ledger); one row per run. Whether the task passes (``require`` of ``repeats``) is the report's. Each
    run is a session of the public API over its fork, in this process."""
    from vak_context import Engine
    from vak_context.farm.sessions import fork

    runs: list[tuple[int | None, str]] = [(None, d) for d in task.directives] + [(t, "") for t in task.turns]
    rows: list[dict[str, Any]] = []
    n = 0
    spec, window = session_model(model, endpoint)
    for which, (before_turn, text) in enumerate(runs):
        for repeat in range(task.repeats):
            ledger = work / f"d{which}-r{repeat}"
            directive = fork(source_root, unit.session, source_head, ledger, before_turn) or text
            workspace = work / f"d{which}-r{repeat}.ws"
            workspace.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            with Engine.open(ledger) as engine:
                async with engine.session(unit.session, model=spec, base_url=endpoint.base_url,
                                          api_key=endpoint.api_key, window=window, workspace=workspace,
                                          card_tools=True, max_steps=task.max_steps,
                                          max_tokens=task.max_tokens) as live:
                    report = await live.run(directive)
                    horizon, declared = live.horizon, live.declared_window
            wall = (time.perf_counter() - started) * 1000
            ok, why = live_outcome(task.expect, report)
            last = report.steps[-1] if report.steps else None
            rows.append(make_row(
                unit, "live", run_id, n, passed=ok, reason=why, node=node,
                horizon=horizon, window=declared,
                budget=last.budget_tokens if last else None, request_tokens=last.prompt_tokens if last else None,
                full_turns=last.fidelity.get("full") if last else None,
                card_turns=last.fidelity.get("card") if last else None,
                packet_turns=last.fidelity.get("packet") if last else None,
                cache_tokens=sum(s.cached_tokens for s in report.steps), wall_ms=wall,
                detail={"directive": directive[:200], "turn": before_turn, "repeat": repeat, "expect": task.expect,
                        "outcome": report.outcome, "steps": len(report.steps),
                        "calls": [c for s in report.steps for c in s.calls], "answer": report.answer[:200],
                        "server_pid": endpoint.server_pid},
            ))
            n += 1
    return rows


def session_model(model: ModelEntry, endpoint: Endpoint) -> tuple[str, int | None]:
    """The API's model spec and window for a live unit: a local model on the node's server
    (``local:<name>`` with its base URL, keyed as ``vak probe`` keys it), else the endpoint's spec."""
    window = (endpoint.n_ctx or model.n_ctx) if endpoint.local_model else endpoint.n_ctx
    if endpoint.local_model:
        return f"local:{endpoint.local_model}", window
    return endpoint.spec, window
