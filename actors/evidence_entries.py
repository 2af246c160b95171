"""The entries a tool result becomes: its evidence body (the whole result, a blob) and the tool_result the
request carries (windowed under the body's id), made alike by the EvidenceActor and by the turn loop's driver on
Ray, which chains them itself (``actors/turn_services.py``)."""

from __future__ import annotations

from typing import Any

from vak_context.context.evidence.digest import body_text, window
from vak_context.errors import InvalidUtf8
from vak_context.events.payloads import EvidenceBody, ToolResult


def evidence_body(tool_use_id: str, tool_name: str, body: bytes | str, *, is_error: bool = False,
                  media_type: str = "text/plain") -> tuple[EvidenceBody, bytes, str]:
    """A tool's whole result as its evidence body entry, the blob it carries, and the body's text."""
    try:
        blob = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    except UnicodeEncodeError as exc:  # a lone surrogate (an OS name that was not UTF-8, passed on as str)
        raise InvalidUtf8(f"the result of {tool_name} ({tool_use_id})", f"lone surrogate at index {exc.start}") from exc
    text = body_text(blob, "utf-8")
    try:
        blob.decode("utf-8")
        encoding, chars = "utf-8", len(text)
    except UnicodeDecodeError:
        encoding, chars = "binary", len(blob)
    meta = EvidenceBody(tool_use_id=tool_use_id, tool_name=tool_name, media_type=media_type, encoding=encoding,
                        chars=chars, bytes=len(blob), is_error=is_error)
    return meta, blob, text


def tool_result(meta: EvidenceBody, text: str, evidence_id: str) -> ToolResult:
    """The tool_result the request carries for a body stored as ``evidence_id``: windowed under that id."""
    carried = window(text, evidence_id)
    return ToolResult(tool_use_id=meta.tool_use_id, tool_name=meta.tool_name, content=carried.text,
                      is_error=meta.is_error, evidence_id=evidence_id, windowed=carried.windowed)


def stored_answer(result: ToolResult, result_id: str) -> dict[str, Any]:
    """What storing a result answers: its body's and its own ids, and what the request carries."""
    return {"evidence_id": result.evidence_id, "result_id": result_id, "content": result.content,
            "windowed": result.windowed, "is_error": result.is_error}
