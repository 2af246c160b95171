"""A scripted threshold model, speaking llama.cpp's documented bodies (its self-tests: tests/unit/test_threshold_model.py).

Served two ways: in-process behind ``httpx.MockTransport``, or on the loopback HTTP server
(``loopback``, through ``tests.fakes.httpserver``) that a Ray actor in another process can reach.

It follows a tool instruction if and only if the prompt is under ``threshold`` tokens (optionally
flipping each answer with probability ``noise``), rejects prompts over ``n_ctx`` with llama.cpp's
``exceed_context_size_error``, reports ``cached_tokens`` for an identical repeat, and answers the
metadata endpoints (``/props``, ``/v1/models``). Prompt tokens are ``chars × tokens_per_char``
plus a fixed template overhead, so the probe must size its histories from reported usage.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.fakes.httpserver import serve

CONTROL_MARK = "Do not call any tool"
NONCE = re.compile(r'ack="([^"]*)"')


class ThresholdModel:
    def __init__(
        self,
        threshold: int,
        *,
        n_ctx: int = 32768,
        declared: int | None = None,
        noise: float = 0.0,
        seed: int = 0,
        tokens_per_char: float = 0.27,
        overhead: int = 24,
        always_calls: bool = False,
        inline: bool = False,
        delay_s: float = 0.0,
        per_message: int = 0,
        wrong_nonce: bool = False,
        reply: str | None = None,
        cut_at: int | None = None,
    ) -> None:
        # ``cut_at``: a followed reply stops after this many characters with finish_reason "length"
        # (max_tokens ran out); a continuation request (the reply so far sent as the assistant's
        # turn) gets the whole reply back, prefix included, as llama.cpp answers it.
        self.cut_at = cut_at
        self.continuations = 0
        # ``per_message``: template tokens per message, as real chat templates add; with it the
        # billed size is not a linear function of the characters sent. ``reply``: the text of a
        # followed instruction (``{nonce}`` is filled in), for the wrappings a real model uses.
        self.per_message, self.wrong_nonce, self.reply = per_message, wrong_nonce, reply
        self.delay_s = delay_s  # per chat call: makes a probe slow enough to cancel mid-flight
        self.threshold, self.n_ctx = threshold, n_ctx
        self.declared = declared if declared is not None else n_ctx
        self.noise, self.rng = noise, random.Random(seed)
        self.tokens_per_char, self.overhead = tokens_per_char, overhead
        self.always_calls, self.inline = always_calls, inline
        self.last_body: bytes | None = None
        self.chat_calls = 0
        self.prompt_sizes: list[int] = []

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        chars = 0
        for m in body["messages"]:
            content = m.get("content") or ""
            chars += len(content if isinstance(content, str) else json.dumps(content))
            for call in m.get("tool_calls") or []:
                chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
        for tool in body.get("tools") or []:
            f = tool["function"]
            chars += len(f["name"]) + len(f["description"]) + len(json.dumps(f["parameters"]))
        return int(chars * self.tokens_per_char) + self.overhead + self.per_message * len(body["messages"])

    def handle(self, request: httpx.Request) -> httpx.Response:
        status, body = self.respond(request.url.path, request.content)
        return httpx.Response(status, json=body)

    def respond(self, path: str, content: bytes) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) for one request; shared by the mock transport and the loopback server."""
        if path.endswith("/props"):
            return (200, {"default_generation_settings": {"n_ctx": self.declared}, "total_slots": 1})
        if path.endswith("/models"):
            return (200, {"object": "list", "data": [
                {"id": "scripted", "object": "model", "meta": {"n_ctx_train": self.declared}}]})
        body = json.loads(content)
        self.chat_calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        prompt = self.prompt_tokens(body)
        self.prompt_sizes.append(prompt)
        if prompt + int(body.get("max_tokens", 0)) > self.n_ctx:
            return (400, {"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": self.n_ctx,
                "message": f"request ({prompt} tokens) exceeds the available context size ({self.n_ctx} tokens), "
                           "try increasing it"}})
        cached = prompt - 1 if content == self.last_body else 0
        self.last_body = content
        continuing = body["messages"][-1]["role"] == "assistant"
        if continuing:
            self.continuations += 1
        last = body["messages"][-2 if continuing else -1]["content"]
        asked = "probe_ack" in last and CONTROL_MARK not in last
        follows = prompt < self.threshold
        # Noise flips answers only: a max_tokens=1 request (the probe's sizing shot) draws nothing,
        # so how many shots a rung takes does not move the seeded sequence of flips.
        if self.noise and body.get("max_tokens", 0) > 1 and self.rng.random() < self.noise:
            follows = not follows
        call = self.always_calls or (asked and follows)
        found = NONCE.search(last)
        nonce = found.group(1) if found else "none"
        if self.wrong_nonce:
            nonce = nonce[::-1] + "0"
        args = json.dumps({"ack": nonce})
        message: dict[str, Any] = {"role": "assistant", "content": "It was about the audit log."}
        finish = "stop"
        if call and self.reply is not None:
            message["content"] = self.reply.replace("{nonce}", nonce)
            if self.cut_at is not None and not continuing and body.get("max_tokens", 0) > 1:
                message["content"], finish = message["content"][: self.cut_at], "length"
        elif call and self.inline:
            message["content"] = f'```tool_call\n{{"name": "probe_ack", "arguments": {args}}}\n```'
        elif call:
            message = {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{self.chat_calls}", "type": "function",
                       "function": {"name": "probe_ack", "arguments": args}}]}
            finish = "tool_calls"
        return (200, {
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "model": "scripted", "object": "chat.completion",
            "usage": {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12,
                      "prompt_tokens_details": {"cached_tokens": cached}},
            "timings": {"cache_n": cached, "prompt_n": prompt - cached, "prompt_ms": 2.0 * (prompt - cached) + 1.0},
        })


@contextmanager
def loopback(model: ThresholdModel) -> Iterator[str]:
    """Serve ``model`` on 127.0.0.1 (a free port) and yield its OpenAI-compatible base URL."""
    with serve(model.handle) as server:
        yield server.base_url
