"""The one loopback HTTP server of the tests (tests/fakes/httpserver.py) and the fakes served on it."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.threshold import ThresholdModel, loopback


def _chat(text: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 32}).encode()


def test_loopback_serves_the_same_model() -> None:
    model = ThresholdModel(100)
    with loopback(model) as url:
        props = httpx.get(url.removesuffix("/v1") + "/props", trust_env=False).json()
        reply = httpx.post(url + "/chat/completions", content=_chat("call probe_ack"), trust_env=False)
    assert props["default_generation_settings"]["n_ctx"] == model.declared
    assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "probe_ack"


def test_the_handler_sees_method_path_headers_and_body_and_its_reply_goes_out_whole() -> None:
    """A request reaches the handler as the ``httpx.Request`` a MockTransport would give it; the reply's
    status, headers and bytes reach the client unchanged."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, headers={"x-echo": request.headers["x-key"]}, content=request.content[::-1])

    with serve(handle) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        reply = httpx.post(server.base_url + "/chat?q=1", content=b"abc", headers={"x-key": "k1"}, trust_env=False)
        assert server.requests == 1
    assert (reply.status_code, reply.headers["x-echo"], reply.content) == (201, "k1", b"cba")
    assert seen[0].method == "POST" and seen[0].url.path == "/v1/chat" and seen[0].url.query == b"q=1"
    assert seen[0].content == b"abc"


def test_the_server_answers_on_127_0_0_1_and_is_gone_after_the_block() -> None:
    with serve(lambda _r: httpx.Response(204)) as server:
        port = server.port
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_requests_are_served_concurrently() -> None:
    """Each request gets its own thread: a handler that waits for a second request does not block it."""
    second = threading.Event()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/first":
            assert second.wait(10), "the second request never arrived while the first was held"
        else:
            second.set()
        return httpx.Response(200, text=request.url.path)

    with serve(handle) as server:
        holder: list[httpx.Response] = []
        first = threading.Thread(target=lambda: holder.append(httpx.get(server.url + "/first", trust_env=False)))
        first.start()
        assert httpx.get(server.url + "/second", trust_env=False).text == "/second"
        first.join(10)
    assert holder and holder[0].text == "/first"


def test_a_handler_that_raises_answers_500_and_fails_the_block() -> None:
    def handle(_request: httpx.Request) -> httpx.Response:
        raise LookupError("no reply scripted for call 3")

    with pytest.raises(LookupError, match="no reply scripted"), serve(handle) as server:
        reply = httpx.get(server.url + "/x", trust_env=False)
        assert reply.status_code == 500 and "no reply scripted for call 3" in reply.text
