"""`vak turn` and `vak chat` in-process, on the public API, against a scripted OpenAI-compatible model
(llama.cpp's documented bodies behind ``httpx.MockTransport``, handed in as the client the session's requests
go through): any ``--model`` spec, ``--base-url``, ``--window``/``--horizon``; wrong arguments are one line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.scripted import Scripted, completion
from vak_context.cli.chat import model_spec, run_chat, run_turn
from vak_context.cli.main import build_parser, main
from vak_context.events.envelope import Mapper
from vak_context.storage.ledger import LedgerStore

BASE = "http://127.0.0.1:9/v1"


def _args(command: str, tmp_path: Path, *extra: str) -> list[str]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    return [command, *extra, "--model", "openai-compat:scripted", "--base-url", BASE, "--workspace", str(ws),
            "--ledger", str(tmp_path / "ledger"), "--session", "cli1", "--no-stream"]


def _client(model: Scripted) -> httpx.AsyncClient:
    """The scripted chat model; ``/apply-template`` and ``/tokenize`` answer 404, as a server without
    llama.cpp's tokenizer endpoints does (requests are then sized by the calibrated estimate)."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(("/apply-template", "/tokenize")):
            return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found"}})
        return model.handle(request)

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def _answers(*texts: str) -> Scripted:
    return Scripted([lambda _body, _i, t=t: (200, completion(t)) for t in texts])


def test_vak_turn_runs_one_turn_through_the_public_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One turn: the step line, the answer and its card; the overrides reach the bound profile; the ledger
    holds the directive, a receipt on the named model and the turn card."""
    model = _answers("Alpha and beta are in notes.txt.")
    args = build_parser().parse_args(_args("turn", tmp_path, "where are alpha and beta?", "--window", "6000",
                                           "--horizon", "3000"))
    client = _client(model)
    try:
        assert run_turn(args, http_client=client) == 0
    finally:
        asyncio.run(client.aclose())
    out = capsys.readouterr().out
    assert "model openai-compat:scripted; session 'cli1'" in out
    assert "  step 1: plan full 0 / card 0 / packet 0" in out and "→ answer" in out
    assert "Alpha and beta are in notes.txt." in out and "[completed; card " in out
    assert model.bodies[0]["model"] == "scripted"
    mapper = Mapper()
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        entries = store.entries("cli1")
    kinds = [e.kind for e in entries]
    assert kinds[0] == "directive" and "receipt" in kinds and kinds[-1] == "turn_card"
    receipt = next(mapper.payload_of(e) for e in entries if e.kind == "receipt")
    assert (receipt.provider, receipt.model) == ("openai-compat", "scripted")
    profile = next(json.loads(e.payload) for e in entries if e.kind == "capacity_profile")
    assert profile["declared_window"] == 6000 and profile["instruction_horizon"]["tokens"] == 3000


def test_vak_chat_runs_a_turn_per_line_and_shows_the_profile(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["hello", "  ", "name one colour"]

    async def read_line() -> str:
        if not lines:
            raise EOFError
        return lines.pop(0)

    model = _answers("Hello.", "Blue.")
    client = _client(model)
    try:
        assert run_chat(build_parser().parse_args(_args("chat", tmp_path, "--window", "8192")),
                        http_client=client, read_line=read_line) == 0
    finally:
        asyncio.run(client.aclose())
    out = capsys.readouterr().out
    assert out.count("; card ") == 2 and "Hello." in out and "Blue." in out
    # the profile's description, before the first turn
    assert out.index("declared window     8,192 tokens") < out.index("Hello.")
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        assert [e.kind for e in store.entries("cli1")].count("turn_card") == 2


@pytest.mark.parametrize(("given", "spec"), [
    ("qwen", "local:qwen"), ("smollm2", "local:smollm2"), ("local:qwen", "local:qwen"),
    ("/models/m.gguf", "local:/models/m.gguf"), ("local:/models/m.gguf", "local:/models/m.gguf"),
    ("openai:gpt-4o-mini", "openai:gpt-4o-mini"), ("anthropic:claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
    ("gemini:gemini-2.5-flash", "gemini:gemini-2.5-flash"), ("ollama:llama3.2:3b", "ollama:llama3.2:3b"),
    ("openai-responses:gpt-4.1", "openai-responses:gpt-4.1"), ("openai-compat:NAME", "openai-compat:NAME"),
])
def test_every_model_spec_the_api_binds_is_accepted(given: str, spec: str) -> None:
    assert model_spec(given) == spec


@pytest.mark.parametrize(("extra", "needle"), [
    (["--model", "openai-compat:m"], "pass --base-url URL"),
    (["--model", "openai-compat:m", "--base-url", "ftp://x"], "http:// or https://"),
    (["--model", "nope:m"], "unknown provider 'nope'"),
    (["--model", "anthropic:claude-sonnet-4-5"], "ANTHROPIC_API_KEY"),
    (["--model", "openai-compat:m", "--base-url", BASE, "--ray", " "], "--ray ADDRESS is empty"),
    (["--model", "openai-compat:m", "--base-url", BASE, "--window", "10"], "--window"),
])
def test_wrong_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch, extra: list[str], needle: str) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rc = main(["turn", "hi", *extra, "--workspace", str(tmp_path), "--ledger", str(tmp_path / "ledger")])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err, err
