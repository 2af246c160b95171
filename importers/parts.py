"""Pieces several formats share: a message's content parts, a tool call's arguments, OpenAI usage.

Tool-call arguments recorded as a JSON string are parsed as strictly as the file (``vak_context.importers.strict_json``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from vak_context.events.payloads import ImageBlock, Usage
from vak_context.importers.strict_json import RecordShapeError, Where, count, first_bad_value, loads, obj

RAW_ARGUMENTS = "tool arguments that are not a JSON object (kept as raw_arguments)"


def openai_usage(raw: Any, where: Where = ()) -> Usage | None:
    """Usage from an OpenAI-style ``usage`` object (prompt/completion tokens, cached and reasoning)."""
    if not isinstance(raw, dict) or "prompt_tokens" not in raw:
        return None
    prompt = count(raw.get("prompt_tokens"), where, "usage.prompt_tokens")
    cached = count(
        obj(raw.get("prompt_tokens_details"), where, "usage.prompt_tokens_details").get("cached_tokens"),
        where,
        "usage.prompt_tokens_details.cached_tokens",
    )
    reasoning = count(
        obj(raw.get("completion_tokens_details"), where, "usage.completion_tokens_details").get(
            "reasoning_tokens"
        ),
        where,
        "usage.completion_tokens_details.reasoning_tokens",
    )
    return Usage(
        input_tokens=max(prompt - cached, 0),
        cache_read_tokens=cached,
        output_tokens=count(raw.get("completion_tokens"), where, "usage.completion_tokens"),
        reasoning_tokens=reasoning,
    )


def arguments(raw: Any, where: Where = ()) -> tuple[dict[str, Any], bool]:
    """Tool-call arguments as a dict; (value, ok). Arguments that are not a JSON object are kept raw.

    Arguments recorded as a JSON string are parsed as strictly as the file: a NaN or a lone
    surrogate inside them is refused, never stored as ``null`` or as text that is not UTF-8.
    """
    if isinstance(raw, dict):
        return raw, True
    if isinstance(raw, str):
        try:
            value = loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            return {"raw_arguments": raw}, False
        bad = first_bad_value(value)
        if bad is not None:
            raise RecordShapeError(where, f"the tool call's arguments: {bad[1]}")
        if isinstance(value, dict):
            return value, True
        return {"raw_arguments": raw}, False
    return {"raw_arguments": json.dumps(raw)}, False


def content_text(content: Any, skipped: Counter[str]) -> tuple[str, tuple[ImageBlock, ...]]:
    """Text (and image references) of a message's content: a string or a list of parts."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    texts: list[str] = []
    images: list[ImageBlock] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
            texts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "image_url":
            url = (
                (part.get("image_url") or {}).get("url", "")
                if isinstance(part.get("image_url"), dict)
                else str(part.get("image_url", ""))
            )
            if url and not url.startswith("data:"):
                images.append(ImageBlock(ref=url))
            else:
                skipped["inline image bytes (the ledger keeps image references, not bytes)"] += 1
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            skipped[f"content part of type {kind!r}"] += 1
    return "\n".join(texts), tuple(images)
