"""``OpenAICompatProvider.encoded_body``: each message encoded once, the body byte for byte what httpx's
``json=render(request)`` sends (issue 37: re-rendering and re-encoding every message of a long session's
window was most of sending a step)."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.fakes.provider_bodies.conversation import CONVERSATION, LOCAL, WEATHER
from vak_context.context.request.messages import ChatRequest, Message
from vak_context.events.blocks import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers import openai_compat
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.openrouter import OpenRouterProvider


def wire(body: object) -> bytes:
    """As httpx encodes ``json=body``."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def provider(cls: type[OpenAICompatProvider] = OpenAICompatProvider) -> OpenAICompatProvider:
    return cls(httpx.AsyncClient(), base_url=LOCAL, api_key="k")


CLOSED = (
    Message(role="user", content=(TextBlock(text="Wetter in Köln? «bitte» \u2028 \"quoted\""),)),
    Message(role="assistant", content=(ThinkingBlock(thinking="hm"), TextBlock(text="Looking."),
                                       ToolUseBlock(id="c1", name="get_weather", input={"location": "Köln", "n": 1.5}))),
    Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="12°C"), TextBlock(text="And?"),
                                  TextBlock(text="two parts"))),
    Message(role="assistant", content=(ToolUseBlock(id="c2", name="get_weather", input={}),)),
    Message(role="user", content=(ThinkingBlock(thinking="renders to nothing"),)),
    Message.assistant(""),
)

REQUESTS = [
    ChatRequest(model="m", messages=CLOSED),
    ChatRequest(model="m", system="Be terse.", tools=(WEATHER,), tool_choice="required", max_tokens=7,
                temperature=0.2, messages=CLOSED, extra={"top_p": 0.9, "seed": 3}),
    ChatRequest(model="m", extra={"model": "other", "stop": ["\n"]}, messages=CLOSED[:2]),
    ChatRequest(model="m"),
]


def test_the_bytes_are_what_httpx_sends_for_the_rendered_body() -> None:
    for cls in (OpenAICompatProvider, OpenAIChatProvider):
        p = provider(cls)
        for request in REQUESTS:
            openai_compat._ENCODED.clear()
            cold = p.encoded_body(request)
            warm = p.encoded_body(request)  # every message from the cache now
            assert cold == warm == wire(p.render(request)), (cls.__name__, request)


def test_a_cached_message_reads_the_same_in_another_request() -> None:
    p = provider()
    p.encoded_body(ChatRequest(model="m", messages=CLOSED))
    later = ChatRequest(model="m", system="s", messages=(*CLOSED[2:], Message.user("the next step")))
    assert p.encoded_body(later) == wire(p.render(later))


def test_a_changed_rendered_body_never_reaches_the_next_request() -> None:
    p = provider()
    request = ChatRequest(model="m", messages=CLOSED)
    expected = p.encoded_body(request)
    body = p.render(request)  # the embedder's body (engine/caller.py) is theirs to change
    body["messages"][1]["tool_calls"][0]["function"]["name"] = "changed"
    body["messages"][0]["content"] = "changed"
    assert p.encoded_body(request) == expected == wire(provider().render(request))


def test_images_and_subclasses_that_render_their_own_way_are_rendered_as_before() -> None:
    p = provider()
    assert p.encoded_body(CONVERSATION) == wire(p.render(CONVERSATION))  # an image: rendered every time
    assert all(entry[0] is not CONVERSATION.messages[0] for entry in openai_compat._ENCODED.values())
    assert provider(OpenRouterProvider).encoded_body(CONVERSATION) is None
    assert p.encoded_body(CONVERSATION.model_copy(update={"extra": {"messages": []}})) is None


def test_complete_sends_the_encoded_bytes() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}], "model": "m"})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            p = OpenAICompatProvider(client, base_url=LOCAL, api_key="k")
            for request in REQUESTS[:2]:
                result = await p.complete(request)
                assert result.text == "ok"
                assert sent[-1].content == wire(p.render(request))
                assert sent[-1].headers["content-type"] == "application/json"
                assert sent[-1].headers["authorization"] == "Bearer k"

    asyncio.run(go())


def test_a_run_of_text_parts_regrouped_reads_the_same_as_httpx_sends_it() -> None:
    """A run of cards is a new message whenever the plan regroups the runs; its parts are kept by their text
    (non-ASCII, escapes, a lone text and a run that shares texts with another), and the bound clears them."""
    p = provider()
    texts = ["card 1: Köln «12°C»", 'card 2: "quoted" \u2028 \\ back', "card 3: plain", "card 4: \t\n tabs"]
    runs = [texts, texts[1:3], texts[::-1], [texts[0], texts[0]], texts[:1]]
    for run in runs:
        message = Message(role="user", content=tuple(TextBlock(text=t) for t in run))
        request = ChatRequest(model="m", system="s", messages=(message, Message.assistant("ok")))
        assert p.encoded_body(request) == wire(p.render(request)), run
    assert set(openai_compat._TEXT_PARTS) >= set(texts[1:])
    before = openai_compat.TEXT_PARTS_MAX_CHARS
    try:
        openai_compat.TEXT_PARTS_MAX_CHARS = 40  # every new text clears what is kept
        message = Message(role="user", content=tuple(TextBlock(text=t * 3) for t in texts))
        request = ChatRequest(model="m", messages=(message,))
        assert p.encoded_body(request) == wire(p.render(request))
        assert openai_compat._TEXT_PARTS_CHARS[0] <= 3 * max(map(len, texts))
    finally:
        openai_compat.TEXT_PARTS_MAX_CHARS = before


def test_the_kept_tools_and_system_prompt_read_as_httpx_sends_them() -> None:
    """The tools' JSON is kept per (adapter, tools tuple) and the system message's by its text: each step of a
    session reads the same bytes as ``json=render(request)``, whatever options come around them, another
    adapter's rendering of the same tuple, or an ``extra`` that replaces the tools."""
    tools = (WEATHER,)
    first, second = provider(), provider(OpenAIChatProvider)
    for p in (first, second, first):
        for request in (
            ChatRequest(model="m", system="Be terse. «ü»", tools=tools, messages=CLOSED[:1]),
            ChatRequest(model="m", system="Be terse. «ü»", tools=tools, tool_choice="auto", max_tokens=3,
                        temperature=0.5, messages=CLOSED[:2], extra={"seed": 1}),
            ChatRequest(model="m", system="Other.", tools=tools, messages=CLOSED[:1], extra={"tools": []}),
            ChatRequest(model="m", tools=tools[:0], messages=CLOSED[:1]),
        ):
            assert p.encoded_body(request) == wire(p.render(request)), (type(p).__name__, request.extra)
