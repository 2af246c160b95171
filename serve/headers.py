"""What a ``vak serve`` request's headers ask, read and checked before the request reaches its session: the
session it names (``x-vak-session``), its rules setting (``x-vak-rules``), the statements it pins
(``x-vak-pin``), whether it is a resend (``Idempotency-Key``, the official clients' retry count), and the
client's key (``Authorization: Bearer`` or ``x-api-key``). Pure: a bad header is a typed error (a 400)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from vak_context.errors import InvalidInput, InvalidRules
from vak_context.serve.continuity import IDEMPOTENCY_HEADER, RETRY_HEADER

SESSION_HEADER = "x-vak-session"
RULES_HEADER = "x-vak-rules"  # this request's rules setting (docs/DRIFT.md); else ServeConfig.rules
PIN_HEADER = "x-vak-pin"  # "[category:] statement", one per header: pinned before the request's turn (docs/STATE.md)


@dataclass(frozen=True)
class Resend:
    """What a client says of a request being a resend: its ``Idempotency-Key`` (the same key, the same
    answer) and the official clients' retry count (``x-stainless-retry-count``; above 0, any exchange the
    session holds with the same history is the one resent, not only the last)."""

    key: str | None = None
    retry: int = 0

    @classmethod
    def of(cls, headers: Any) -> Resend:
        retry = headers.get(RETRY_HEADER, "0")
        return cls(headers.get(IDEMPOTENCY_HEADER) or None, int(retry) if retry.isascii() and retry.isdigit() else 0)


FRESH = Resend()  # a request no header marks as a resend


def request_rules(header: str | None) -> str | None:
    """A request's ``x-vak-rules`` header, checked (a bad one is a 400 naming the header and what it
    allows); None when the request sends none."""
    if header is None:
        return None
    from vak_context.context.rules.setting import CALLERS, invalid, rule_setting

    try:
        rule_setting(header, CALLERS)
    except InvalidRules as exc:
        raise invalid(f"{header!r} (the {RULES_HEADER} header)") from exc
    return header


def request_pins(values: Sequence[str]) -> list[tuple[str, str]]:
    """A request's ``x-vak-pin`` headers as (category, statement): ``rule: Never push to main``, or the
    statement alone (its category as the engine reads it, else ``rule``). A blank one is a 400."""
    from vak_context.context.stated.extract import classify
    from vak_context.context.stated.items import CATEGORIES

    out = []
    for value in values:
        head, sep, rest = value.partition(":")
        category, text = (head.strip().lower(), rest.strip()) if sep and head.strip().lower() in CATEGORIES else ("", value.strip())
        if not text:
            raise InvalidInput(f"the {PIN_HEADER} header {value!r} states nothing: send 'rule: Never push to main' "
                               f"(a category of {', '.join(CATEGORIES)}, then the statement) or the statement alone")
        if not category:
            draft = classify(text)
            category = draft.category if draft is not None else "rule"
        out.append((category, text))
    return out


def client_key(request: Request) -> str:
    """The key the client sent: its Bearer token, else its ``x-api-key``."""
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
