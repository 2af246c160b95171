"""Streaming chat completions in the OpenAI-compatible adapter, over ``httpx.MockTransport`` answering with
llama.cpp's documented server-sent events (``data: {chunk}`` lines, a last chunk with ``usage`` and
``timings``, then ``data: [DONE]``): assembly, key scrubbing while streaming, errors and retries."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from vak_context.context.request.messages import ChatRequest, Message
from vak_context.errors import ContextOverflow, ProviderRequestError, RetryableProviderError
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.providers.streaming import StreamAssembler

KEY = "sk-live-0123456789abcdefSTREAM"
REQUEST = ChatRequest(model="m", messages=(Message.user("hi"),), max_tokens=64)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "qwen.gguf",
            "choices": choices, **extra}


def sse(*chunks: dict[str, Any] | str) -> bytes:
    lines = [": keep-alive"]  # a comment line, as servers send
    for c in chunks:
        lines.append("data: " + (c if isinstance(c, str) else json.dumps(c)))
    return ("\n\n".join(lines) + "\n\n").encode()


def text_stream(pieces: list[str], *, prompt: int = 40, cached: int = 30) -> bytes:
    return sse(*[chunk({"role": "assistant", "content": p}) for p in pieces],
               chunk({}, "stop"),
               chunk(None, usage={"prompt_tokens": prompt, "completion_tokens": len(pieces), "total_tokens": prompt + 1,
                                  "prompt_tokens_details": {"cached_tokens": cached}},
                     timings={"prompt_n": prompt - cached, "prompt_ms": 12.5, "predicted_n": len(pieces)}),
               "[DONE]")


def provider(handler: Any, *, attempts: int = 1) -> tuple[OpenAICompatProvider, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    retry = RetryPolicy(attempts=attempts, sleep=_no_wait)
    return OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", api_key=KEY, retry=retry), client


async def _no_wait(_seconds: float) -> None:
    return None


def streamed(body: bytes, status: int = 200) -> Any:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})

    handler.sent = sent  # type: ignore[attr-defined]
    return handler


async def test_deltas_join_to_the_text_and_usage_and_timings_come_from_the_last_chunk() -> None:
    """The request asks for a stream with usage; every delta is shown in order; the result's text, usage
    (prompt, cached, output) and timings are those of the stream."""
    handler = streamed(text_stream(["The ", "ledger ", "is ", "append-only."]))
    p, client = provider(handler)
    shown: list[str] = []
    async with client:
        result = await p.complete_streaming(REQUEST, shown.append)
    assert handler.sent[0]["stream"] is True and handler.sent[0]["stream_options"] == {"include_usage": True}
    assert "".join(shown) == result.text == "The ledger is append-only."
    assert (result.usage.prompt_tokens, result.usage.cache_read_tokens, result.usage.output_tokens) == (40, 30, 4)
    assert result.timings["prompt_ms"] == 12.5 and result.stop_reason == "stop"


async def test_tool_call_deltas_are_assembled_by_index() -> None:
    """Two calls streamed in pieces (id and name once, arguments split mid-token) become two parsed calls."""
    body = sse(
        chunk({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                               "function": {"name": "grep", "arguments": '{"pat'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c1", "type": "function",
                               "function": {"name": "read_file", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'tern": "beta"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"path": "a.txt"}'}}]}),
        chunk({}, "tool_calls"), "[DONE]")
    p, client = provider(streamed(body))
    async with client:
        result = await p.complete_streaming(REQUEST, lambda _t: None)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("c0", "grep", {"pattern": "beta"}), ("c1", "read_file", {"path": "a.txt"})]
    assert result.stop_reason == "tool_calls"


@pytest.mark.parametrize("cut", [1, 5, 11, len(KEY) - 1])
async def test_a_key_split_over_deltas_is_never_shown_even_in_part(cut: int) -> None:
    """The model echoes the key split across two deltas: no shown piece, nor all of them joined, holds the
    key or its first half; the result's text has it redacted."""
    pieces = ["Your key is ", KEY[:cut], KEY[cut:], " and that is all. " + "More words. " * 60]
    p, client = provider(streamed(text_stream(pieces)))
    shown: list[str] = []
    async with client:
        result = await p.complete_streaming(REQUEST, shown.append)
    joined = "".join(shown)
    assert KEY not in joined and KEY[: len(KEY) // 2] not in joined and KEY not in result.text
    assert joined == result.text and "[redacted]" in joined
    assert len(shown) >= 2  # the long tail after the key streamed, not only the end


async def test_a_server_error_before_any_text_is_retried_then_typed() -> None:
    """HTTP 503 on every try: retried as ``complete`` retries, then RetryableProviderError; nothing shown."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503, json={"error": {"message": "loading model", "code": 503}})

    p, client = provider(handler, attempts=3)
    shown: list[str] = []
    async with client:
        with pytest.raises(RetryableProviderError, match="503"):
            await p.complete_streaming(REQUEST, shown.append)
    assert len(calls) == 3 and shown == []


async def test_an_over_length_rejection_is_context_overflow_with_sizes() -> None:
    """llama.cpp's 400 for a prompt over n_ctx, on a streamed request, is ContextOverflow as on a plain one."""
    body = {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192,
                      "message": "request (9000 tokens) exceeds the available context size (8192 tokens), "
                                 "try increasing it"}}
    p, client = provider(lambda _r: httpx.Response(400, json=body))
    async with client:
        with pytest.raises(ContextOverflow) as info:
            await p.complete_streaming(REQUEST, lambda _t: None)
    assert info.value.prompt_tokens == 9000


@pytest.mark.parametrize("bad", ["{not json", '{"choices": [', "\udcff"])
async def test_a_malformed_chunk_is_a_typed_error(bad: str) -> None:
    """A chunk that is not JSON ends the call with ProviderRequestError naming what to do."""
    body = b"data: " + bad.encode("utf-8", "surrogateescape") + b"\n\n"
    p, client = provider(streamed(body))
    async with client:
        with pytest.raises(ProviderRequestError, match="not JSON"):
            await p.complete_streaming(REQUEST, lambda _t: None)


async def test_a_chunk_nested_too_deep_to_decode_is_a_typed_error() -> None:
    """A chunk nested 100,000 deep (json.loads raises RecursionError) ends the call with ProviderRequestError."""
    body = b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"
    p, client = provider(streamed(body))
    async with client:
        with pytest.raises(ProviderRequestError, match="nested too deep"):
            await p.complete_streaming(REQUEST, lambda _t: None)


def test_the_assembler_survives_odd_chunks() -> None:
    """Chunks with no choices, non-dict deltas, an index-less call and a huge delta assemble without error."""
    a = StreamAssembler("t")
    assert a.feed(json.dumps(chunk(None))) == ""
    assert a.feed(json.dumps({"choices": [{"delta": "x"}]})) == ""
    a.feed(json.dumps(chunk({"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]})))
    huge = "y" * 1_000_000
    assert a.feed(json.dumps(chunk({"content": huge}))) == huge
    body = a.body()
    assert body["choices"][0]["message"]["content"] == huge
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"


async def test_a_turn_with_on_text_streams_each_step_and_keeps_the_receipts(tmp_path: Any) -> None:
    """TurnLoop with ``on_text``: a tool step and an answer step are both streamed; the shown text of the
    last step is the answer; each step's receipt carries the stream's usage (prompt 40, cached 30)."""
    from tests.fakes.scripted import PROFILE, tool_surface
    from vak_context.actors.local_services import InProcessServices
    from vak_context.agent.loop import TurnConfig, TurnLoop
    from vak_context.agent.workspace import Workspace
    from vak_context.context.request.assemble import system_prompt
    from vak_context.events.envelope import Mapper
    from vak_context.storage.ledger import LedgerStore

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("alpha\nbeta\n")
    replies = [sse(chunk({"content": "Looking.\n```json\n"}), chunk({"content": '{"name": "grep", "arguments": '}),
                   chunk({"content": '{"pattern": "beta"}}\n```'}), chunk({}, "stop"),
                   chunk(None, usage={"prompt_tokens": 40, "completion_tokens": 9,
                                      "prompt_tokens_details": {"cached_tokens": 30}}), "[DONE]"),
               text_stream(["beta is ", "on line 2."])]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=replies.pop(0), headers={"content-type": "text/event-stream"})

    shown: list[str] = []
    surface = tool_surface()
    config = TurnConfig(model="m", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=4, max_tokens=64, text_calls=True)  # it writes a fence, as Qwen does
    with LedgerStore(tmp_path / "ledger") as store:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            p = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
            loop = TurnLoop(InProcessServices(store, "s1"), p, PROFILE, config, workspace=Workspace(tmp_path / "ws"),
                            on_text=shown.append)
            report = await loop.run("where is beta?")
        receipts = [Mapper().payload_of(e) for e in store.entries("s1") if e.kind == "receipt"]
    assert report.outcome == "completed" and report.answer == "beta is on line 2."
    assert "".join(shown).startswith("Looking.") and "".join(shown).endswith("beta is on line 2.")
    assert len(receipts) == 2 and all(r.usage.cache_read_tokens == 30 for r in receipts)
