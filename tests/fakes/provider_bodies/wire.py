"""A scripted ``httpx.MockTransport`` for the provider wire tests: replies in order, requests recorded.

Each reply is ``(status, body)`` / ``(status, body, headers)``, or an exception instance the transport raises
(``httpx.ReadTimeout(...)``), or a callable ``request -> httpx.Response``. Bodies are the providers' documented
JSON, loaded with ``body("anthropic", "message")``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import httpx

from vak_context.providers.base import RetryPolicy

BODIES = Path(__file__).resolve().parent

Reply = (
    tuple[int, Any]
    | tuple[int, Any, dict[str, str]]
    | BaseException
    | Callable[[httpx.Request], httpx.Response]
)


@cache
def _load(provider: str) -> dict[str, Any]:
    return json.loads((BODIES / f"{provider}.json").read_text())


def body(provider: str, name: str) -> Any:
    """A fresh copy of one documented body (tests may mutate it)."""
    return json.loads(json.dumps(_load(provider)[name]))


class Wire:
    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected request {request.method} {request.url}: no reply scripted")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(request)
        status, payload, *rest = reply
        headers = rest[0] if rest else {}
        if isinstance(payload, str | bytes):
            return httpx.Response(status, content=payload, headers=headers)
        return httpx.Response(status, json=payload, headers=headers)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))

    def sent(self, index: int = -1) -> Any:
        """The JSON body of a recorded request."""
        return json.loads(self.requests[index].content)


class Sleeps:
    """An injectable sleep that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def fast_retry(attempts: int = 3, **kw: Any) -> tuple[RetryPolicy, Sleeps]:
    sleeps = Sleeps()
    return RetryPolicy(attempts=attempts, sleep=sleeps, rng=random.Random(7), **kw), sleeps
