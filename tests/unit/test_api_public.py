"""What the public API promises besides the turns themselves: importing it costs nothing (no Ray, no
pyarrow), ``__all__`` is complete and sorted and every name resolves (httpx's exported-members test),
the version comes from the package metadata, the embedder's stance and identity reach the request,
errors at the API are typed and say what to do next, a second writer of a session is refused, and a
caller's exception mid-turn leaves a ``turn.failed`` activity and a failed card in the ledger."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.embedder import ScriptedModel, make_tools
from vak_context import errors, extras
from vak_context.storage.ledger import LedgerStore

SCRIPTED = {"model": "openai-compat:scripted", "base_url": "http://127.0.0.1:9/v1", "window": 8_000}


def test_importing_the_package_imports_neither_ray_nor_pyarrow() -> None:
    """In a fresh interpreter: ``import vak_context``, then touching the API's names, the tool registry and
    the errors, still imports neither (both wait for an engine to be opened)."""
    code = (
        "import sys, vak_context\n"
        "before = sorted(m for m in ('ray', 'pyarrow') if m in sys.modules)\n"
        "vak_context.Engine, vak_context.Session, vak_context.TurnResult, vak_context.ToolRegistry\n"
        "vak_context.VakError, vak_context.SessionLocked, vak_context.__version__\n"
        "after = sorted(m for m in ('ray', 'pyarrow') if m in sys.modules)\n"
        "print(before, after)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr


def test_all_is_complete_sorted_and_every_name_resolves() -> None:
    public = [name for name in dir(vak_context) if not name.startswith("_")]
    assert public == vak_context.__all__ == sorted(vak_context.__all__)
    for name in vak_context.__all__:
        assert getattr(vak_context, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'LedgerStore'"):
        vak_context.LedgerStore  # noqa: B018  (internal: not re-exported)


def test_every_public_error_is_exported() -> None:
    classes = {n for n, o in vars(errors).items()
               if inspect.isclass(o) and issubclass(o, errors.VakError) and not n.startswith("_")}
    assert classes <= set(vak_context.__all__)
    assert vak_context.SessionLocked is errors.SessionLocked


def test_the_version_is_the_package_metadata() -> None:
    assert vak_context.__version__ == importlib.metadata.version("vak-context") == "0.1.0"


async def test_a_wrong_spec_names_the_known_providers(tmp_path: Path) -> None:
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        with pytest.raises(vak_context.InvalidInput) as caught:
            await engine.session("s", model="opena1:gpt-4o-mini").start()
    text = str(caught.value)
    assert "'opena1'" in text and "anthropic" in text and "openai-compat" in text and "local:<name>" in text


async def test_a_missing_key_names_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        session = engine.session("s", model="anthropic:claude-sonnet-4-5")
        with pytest.raises(vak_context.ConfigError, match="ANTHROPIC_API_KEY"):
            await session.run("hello")
        await session.close()


async def test_a_bundled_model_without_the_local_extra_is_missing_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "local", ("vak_no_such_module",))
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        with pytest.raises(vak_context.MissingExtra, match=r"vak-context\[local\]"):
            await engine.session("s", model="local:qwen").start()


async def test_stance_and_identity_are_the_embedders(tmp_path: Path) -> None:
    model, (tools, _) = ScriptedModel(), make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, http_client=client, tools=tools,
                                     identity="You are Ledgerly, the billing desk's assistant.",
                                     stance="Quote invoice numbers exactly.")
            result = await session.run("please search query-001")
    assert result.outcome == "completed"
    first = model.requests[0]
    assert first["messages"][0] == {"role": "system", "content": first["messages"][0]["content"]}
    assert first["messages"][0]["content"].startswith("You are Ledgerly, the billing desk's assistant.")
    assert vak_context.DEFAULT_IDENTITY not in first["messages"][0]["content"]
    tail = json.dumps(first["messages"][1])
    assert "<stance>Quote invoice numbers exactly.</stance>" in tail and vak_context.DEFAULT_STANCE not in tail
    assert {t["function"]["name"] for t in first["tools"]} == {"recall", "find_tools", "session_search", "commitments",
                                                              "web_search", "run_command"}


async def test_the_workspace_tools_join_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    model = ScriptedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, http_client=client, tools=make_tools()[0],
                                     workspace=tmp_path / "ws")
            await session.run("please search query-001")
    names = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert {"read_file", "web_search"} <= names


async def test_a_second_writer_of_a_session_is_refused(tmp_path: Path) -> None:
    model = ScriptedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as first, vak_context.Engine.open(tmp_path / "ledger") as second:
            async with first.session("s", **SCRIPTED, http_client=client, tools=make_tools()[0]) as session:
                await session.run("please search query-001")
                with pytest.raises(vak_context.SessionLocked, match="already has a writer") as locked:
                    await second.session("s", **SCRIPTED, http_client=client).start()
                # what to do, in public names only
                said = str(locked.value)
                assert "session.close()" in said and "Engine.open(folder, ray=...)" in said
                assert not any(internal in said for internal in ("LedgerActor", "LedgerStore", "read-only"))
                with pytest.raises(vak_context.InvalidInput, match="already open in this engine"):
                    first.session("s", **SCRIPTED, http_client=client)
                # Another session of the same folder is another writer's to take.
                async with second.session("t", **SCRIPTED, http_client=client, tools=make_tools()[0]) as other:
                    assert (await other.run("please search query-002")).outcome == "completed"


async def test_a_caller_exception_leaves_a_failed_turn_in_the_ledger_and_the_next_turn_works(tmp_path: Path) -> None:
    model, (tools, _) = ScriptedModel(), make_tools()
    failing = [True]

    def on_step(step: vak_context.Step) -> None:
        if failing:
            failing.clear()
            raise KeyError("the embedder's bookkeeping")

    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", **SCRIPTED, http_client=client, tools=tools, on_step=on_step) as session:
                with pytest.raises(KeyError, match="bookkeeping"):
                    await session.run("please search query-001")
                after = await session.run("please search query-002")
                cards = session.cards()
    assert [c.outcome for c in cards] == ["failed", "completed"] and after.card.id == cards[1].id
    assert cards[0].reason == "KeyError: \"the embedder's bookkeeping\"" and cards[1].reason == ""
    from vak_context.events.envelope import Mapper
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        payloads: list[Any] = [Mapper().payload_of(e) for e in store.entries("s")]
    failed = [p.detail for p in payloads if p.kind == "activity" and p.activity == "turn.failed"]
    assert failed == [{"error": "KeyError", "why": "\"the embedder's bookkeeping\""}]
    kinds = [p.kind for p in payloads]
    directives = [i for i, k in enumerate(kinds) if k == "directive"]
    assert kinds.count("turn_card") == 2 and directives[0] < kinds.index("turn_card") < directives[1]


def test_an_unknown_repeat_rule_is_refused_naming_the_rules(tmp_path: Path) -> None:
    """``repeat_rule`` is checked when the session is made, before anything binds or is written."""
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        with pytest.raises(vak_context.InvalidInput, match="'close', 'redo'"):
            engine.session("s", model="openai-compat:m", base_url="http://127.0.0.1:9/v1", repeat_rule="retry")
        assert engine.session("s", model="openai-compat:m", base_url="http://127.0.0.1:9/v1", repeat_rule="redo")


async def test_a_sessions_calls_are_read_from_text_only_where_declared_measured_or_bundled(tmp_path: Path) -> None:
    """``session.calls``: "native" for a model nothing says writes its calls as text; "text" once a probe
    measured it following the inline protocol (the profile recorded in the ledger), for a bundled Qwen (its
    catalogue entry), or where the operator declares it; ``calls="native"`` overrides both."""
    from dataclasses import replace

    from vak_context.context.capacity.profile import (
        CapacityProfile,
        Ewma,
        Horizon,
        ProbeProvenance,
        ProfileKey,
        to_record,
    )

    async def calls_of(engine: vak_context.Engine, name: str, **options: Any) -> str:
        async with engine.session(name, http_client=client, **options) as session:
            return session.calls

    async with httpx.AsyncClient(transport=httpx.MockTransport(ScriptedModel().handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            assert await calls_of(engine, "plain", **SCRIPTED) == "native"
            assert await calls_of(engine, "declared", **SCRIPTED, calls="text") == "text"
            qwen = {"model": "local:qwen", "base_url": "http://127.0.0.1:9/v1", "window": 8_000}
            assert await calls_of(engine, "qwen", **qwen) == "text"
            assert await calls_of(engine, "qwen-native", **qwen, calls="native") == "native"
            with pytest.raises(vak_context.InvalidInput, match="calls must be one of"):
                engine.session("bad", **SCRIPTED, calls="fenced")
        probed = CapacityProfile(ProfileKey("openai-compat", "scripted"), 8_000, Horizon(6_000, 0.9, 0.0),
                                 Ewma(0.25, 3), 256)
        probed = replace(probed, provenance=ProbeProvenance(source="probe", protocol="inline_fence"))
        with LedgerStore(tmp_path / "ledger") as store:
            store.append("capacity", [to_record(probed)])
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            assert await calls_of(engine, "measured", **SCRIPTED) == "text"


async def test_the_prompt_budget_is_request_budget_and_the_old_name_window_warns_and_agrees(tmp_path: Path) -> None:
    """``Session.request_budget`` is the most tokens a request's prompt may carry (the profile's budget), not
    the model's window (``declared_window``, what ``window=`` sets); ``Session.window``, its old name, still
    answers the same value for one minor version, with a DeprecationWarning naming the new name."""
    from vak_context.context.capacity.profile import request_budget

    model = ScriptedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", **SCRIPTED, http_client=client) as session:
                budget = session.request_budget
                assert budget == request_budget(session._bound_loop().profile)
                assert session.declared_window == 8_000 and 0 < budget < session.declared_window
                with pytest.warns(DeprecationWarning, match="Session.request_budget"):
                    assert session.window == budget
    assert model.requests == []  # binding asked the model nothing
