"""The one map from HTTP failures to the project's typed errors, for every adapter's plain and streaming calls.

Two kinds of failure reach an adapter from httpx, and each has one translation here:

* the transport failed (no response): ``transport_errors()`` turns a timeout or a dropped/refused connection
  into ``RetryableProviderError`` and any other ``httpx.HTTPError`` into ``ProviderRequestError``, with
  ``raise ... from exc`` and the key scrubbed from the library's message;
* a response came back non-2xx: ``status_error()`` turns 408/429/5xx (not 501) into ``RetryableProviderError``
  with the provider's ``Retry-After``, 401/403 into "check the key", 404 into "check the model and base_url",
  and anything else into "fix the request" (over-length replies are the adapter's ``overflow()``, asked first
  by ``Provider.map_error``). ``error_body()`` is the decoded body, or the scrubbed text of one that is not
  JSON (bad UTF-8 is replaced, never raised).

The wording is the same on both paths, so a caller (and a test) sees the same error for the same failure
whether the answer was streamed or not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from vak_context.errors import ProviderError, ProviderRequestError, RetryableProviderError

# The transport broke after it was reached: worth another try, unlike a malformed URL or an unsupported scheme.
_DROPPED = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI), ``Retry-After`` seconds, or ``Retry-After`` HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def error_message(body: Any) -> str:
    """The human message inside a provider error body, whatever its shape."""
    if isinstance(body, list) and body:  # Gemini sometimes wraps the error in a list
        body = body[0]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg") or err.get("detail")
            if isinstance(msg, str) and msg:
                return msg
            return json.dumps(err)[:500]
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
        return json.dumps(body)[:500]
    return str(body)[:500]


@contextmanager
def transport_errors(
    provider: str, call: str, *, base_url: str, timeout_s: float, redact: Callable[[str], str]
) -> Iterator[None]:
    """Run an httpx call (``call`` names it, e.g. ``POST /chat/completions``), translating its failures."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise RetryableProviderError(
            f"{provider}: {type(exc).__name__} after {timeout_s:g}s on {call}. "
            "Retried with backoff; raise timeout_s for long prompts on slow models.",
            provider=provider,
        ) from exc
    except _DROPPED as exc:
        raise RetryableProviderError(
            f"{provider}: connection failed on {call} ({type(exc).__name__}). "
            f"Check that the server at {base_url} is running and reachable.",
            provider=provider,
        ) from exc
    except httpx.HTTPError as exc:
        raise ProviderRequestError(
            f"{provider}: {type(exc).__name__} on {call}: {redact(str(exc))}. Check base_url.",
            provider=provider,
        ) from exc


def error_body(decoded: Any, text: str, redact: Callable[[str], str]) -> Any:
    """The body to read an error from: the decoded JSON, or (None: not JSON) the scrubbed text as a message."""
    return decoded if decoded is not None else {"error": {"message": redact(text)[:500]}}


def status_error(
    provider: str, status: int, message: str, *, retry_after: float | None, key_hint: str, base_url: str
) -> ProviderError:
    """A non-2xx status (not over-length) with the provider's scrubbed ``message`` as the typed error."""
    if status in (408, 429) or (status >= 500 and status != 501):
        wait = f" (the provider asked to wait {retry_after:g}s)" if retry_after is not None else ""
        return RetryableProviderError(
            f"{provider}: HTTP {status}: {message}{wait}. Retried with backoff; if it persists, "
            "slow down, check the provider's status page, or use another provider.",
            provider=provider,
            status=status,
            retry_after=retry_after,
        )
    if status in (401, 403):
        step = f"check {key_hint} (is it set, valid, and allowed to use this model?)"
    elif status == 404:
        step = f"check the model name and base_url ({base_url}); list models with the provider's catalogue"
    else:
        step = "fix the request (see the provider's message above)"
    return ProviderRequestError(f"{provider}: HTTP {status}: {message}. Next step: {step}.",
                                provider=provider, status=status)
