"""``vak serve``'s rules setting (issue 33): the weather question of a smolagents-style agent, through the
server in front of a scripted upstream that calls the client's ``get_weather`` and answers from its result.

By default (``observe``: the client is the agent) the client gets the upstream's answer built from the
tool's result, and the ledger records the freshness verdict as an activity; under ``enforce`` the rule may
act, but never says nothing was observed after the tool succeeded; ``off`` records nothing. An answer the
rule would have redone reaches the client unchanged under ``observe`` (one upstream call, the verdict
recorded) and is redone under ``enforce``. A request's ``x-vak-rules`` header overrides the server's
setting for that request; a bad one is a 400 naming the header and what it allows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.httpserver import serve
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.weather import ANSWER, NO_DATA, UNOBSERVED, WeatherUpstream, ask
from vak_context.cli.main import build_parser
from vak_context.engine.api import Engine
from vak_context.errors import InvalidRules
from vak_context.events.envelope import Mapper
from vak_context.serve.app import ServeConfig, build_app

SPEC = "openai-compat:scripted"


def activities(ledger: Path, session: str) -> list[tuple[str, dict[str, Any]]]:
    """The session's activities, in order: (name, detail)."""
    with Engine.open(ledger) as engine:
        reader, mapper = engine.ledger(), Mapper()
        out = []
        for entry in reader.entries(session):
            if entry.kind == "activity":
                payload = mapper.payload_of(entry)
                out.append((payload.activity, dict(payload.detail)))
        return out


def rule_activities(ledger: Path, session: str) -> list[tuple[str, dict[str, Any]]]:
    return [(a, d) for a, d in activities(ledger, session) if a.startswith("rule.")]


@pytest.mark.parametrize("rules", ["observe", "enforce", "off"])
def test_the_weather_answer_is_built_from_the_tool_result(tmp_path: Path, rules: str) -> None:
    upstream = WeatherUpstream()
    ledger = tmp_path / "ledger"
    with serve(upstream.handle) as up, running(ledger, SPEC, up.base_url, rules=rules) as server:
        asked = ask(server.base_url, CLIENT_KEY, session="weather-1")
    assert asked.status == 200 and asked.answer == ANSWER and asked.calls == 1
    assert len(upstream.requests) == 2  # the call, then the answer: no extra model call
    recorded = rule_activities(ledger, "weather-1")
    if rules == "off":
        assert recorded == []
        return
    assert recorded == [("rule.freshness", {
        "verdict": "observed", "acted": False, "mode": rules, "observed_by": ["get_weather"],
        "undeclared": ["get_weather"], "succeeded": ["get_weather"]})]
    statements = [d for a, d in activities(ledger, "weather-1") if a == "rule.close"]
    assert statements == []  # never "no current value was retrieved" after get_weather succeeded


def test_observe_is_the_default_and_enforce_acts(tmp_path: Path) -> None:
    """An answer from nothing: under the default it reaches the client as the upstream wrote it, with the
    verdict the rule would have given recorded; ``--rules enforce`` (ServeConfig.rules) nudges and redoes."""
    assert ServeConfig("openai-compat:x").rules == "observe"
    observed, enforced = WeatherUpstream(call_tool=False), WeatherUpstream(call_tool=False)
    with serve(observed.handle) as up, running(tmp_path / "a", SPEC, up.base_url) as server:
        default = ask(server.base_url, CLIENT_KEY, session="w")
    with serve(enforced.handle) as up, running(tmp_path / "b", SPEC, up.base_url, rules="enforce") as server:
        enforce = ask(server.base_url, CLIENT_KEY, session="w")
    assert default.answer == UNOBSERVED and len(observed.requests) == 1
    would = [d for a, d in rule_activities(tmp_path / "a", "w") if a == "rule.observed"]
    assert [(d["rule"], d["would"]) for d in would] == [("freshness-check", "redo")]
    assert not any("[freshness-check]" in str(body) for body in observed.requests)
    assert enforce.answer == NO_DATA and len(enforced.requests) == 2
    assert "[freshness-check]" in str(enforced.requests[1]["messages"])


def test_the_header_overrides_the_setting_for_its_request(tmp_path: Path) -> None:
    upstream = WeatherUpstream(call_tool=False)
    with serve(upstream.handle) as up, running(tmp_path / "ledger", SPEC, up.base_url) as server:
        off = ask(server.base_url, CLIENT_KEY, session="h-off", headers={"x-vak-rules": "off"})
        enforced = ask(server.base_url, CLIENT_KEY, session="h-enf",
                       headers={"X-Vak-Rules": "off,freshness-check=enforce"})
        bad = ask(server.base_url, CLIENT_KEY, session="h-bad", headers={"x-vak-rules": "strict"})
    assert off.answer == UNOBSERVED and rule_activities(tmp_path / "ledger", "h-off") == []
    assert enforced.answer == NO_DATA
    assert bad.status == 400
    message = bad.error["error"]["message"]
    assert "x-vak-rules" in message and "'strict'" in message
    assert all(word in message for word in ("enforce", "observe", "off", "freshness-check"))


def test_the_flag_and_a_bad_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--upstream", SPEC])
    assert args.rules == "observe"
    assert parser.parse_args(["serve", "--upstream", SPEC, "--rules", "enforce,steering-drift=off"]).rules == \
        "enforce,steering-drift=off"
    for command in (["chat"], ["turn", "hello"]):
        assert parser.parse_args([*command, "--rules", "observe"]).rules == "observe"
        assert parser.parse_args(command).rules == "enforce"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--upstream", SPEC, "--rules", "loud"])
    err = capsys.readouterr().err
    assert "--rules" in err and "enforce, observe, off" in err
    with Engine.open(tmp_path / "ledger") as engine, pytest.raises(InvalidRules):
        build_app(engine, ServeConfig(SPEC, rules="freshness=off"))
