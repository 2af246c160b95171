"""``openhands``: OpenHands eval output, JSON Lines with one run (its event stream, ``history``) a line.

An action the model chose carries ``tool_call_metadata`` with the whole model response; the events
of one response (parallel calls) share its id and become one step.
"""

from __future__ import annotations

from typing import Any

from vak_context.events.payloads import TextBlock, ToolUseBlock
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.parts import RAW_ARGUMENTS, arguments, openai_usage
from vak_context.importers.recording import (
    ControlText,
    ModelStep,
    Note,
    Recording,
    SystemPrompt,
    ToolOutput,
    UserText,
)
from vak_context.importers.strict_json import Where, array, obj, record_at

NAME = "openhands"


def sniff(doc: Document) -> bool:
    """JSON Lines whose first object has a ``history`` and an ``instance_id``."""
    first = doc.first_row
    return doc.rows is not None and "history" in first and "instance_id" in first


def parse(doc: Document) -> list[Recording]:
    return parse_openhands(doc.rows or [], doc.stem)


def parse_openhands(lines: list[tuple[int, dict[str, Any]]], name: str) -> list[Recording]:
    """One session per JSONL line; an event with the wrong shape is refused with its line."""
    out = []
    for lineno, item in lines:
        where: Where = (lineno,)
        with record_at(where, "an OpenHands run"):
            rec = Recording(
                name=f"{name}-{item.get('instance_id', lineno)}", format=NAME, source={"line": lineno}
            )
            rec.at(where)
            config = obj(obj(item.get("metadata"), where, "metadata").get("llm_config"), where, "llm_config")
            model = str(config.get("model", ""))
            steps: dict[str, ModelStep] = {}
            for i, ev in enumerate(array(item.get("history"), where, "history")):
                with record_at(where, f"history event #{i}"):
                    _openhands_event(obj(ev, where, f"history event #{i}"), rec, steps, model, where)
            metrics = obj(item.get("metrics"), where, "metrics")
            rec.events.append(
                Note(
                    "import.run_info",
                    {
                        "instance_id": item.get("instance_id"),
                        "error": item.get("error"),
                        "accumulated_cost": metrics.get("accumulated_cost"),
                        "accumulated_token_usage": metrics.get("accumulated_token_usage"),
                    },
                )
            )
        out.append(rec)
    return out


def _openhands_event(
    ev: dict[str, Any], rec: Recording, steps: dict[str, ModelStep], model: str, where: Where
) -> None:
    meta = obj(ev.get("tool_call_metadata"), where, "tool_call_metadata")
    args = obj(ev.get("args"), where, "args")
    action, observation, source = ev.get("action"), ev.get("observation"), ev.get("source")
    if action == "system":
        rec.events.append(SystemPrompt(str(args.get("content", ""))))
    elif action == "message" and source == "user":
        rec.events.append(UserText(str(args.get("content", ""))))
    elif action == "recall" or observation == "recall":
        detail = {
            "message": ev.get("message"),
            "args" if action else "extras": args if action else ev.get("extras"),
        }
        rec.events.append(Note("import.openhands_recall", detail))
    elif action and meta:
        _tool_call(ev, action, meta, args, rec, steps, model, where)
    elif observation and meta:
        rec.events.append(_tool_output(ev, observation, meta, where))
    elif observation == "error":  # a call the agent could not parse: the model saw the error as a message
        rec.events.append(ControlText("tool-error", str(ev.get("content", ""))))
    elif action == "message" and source == "agent":
        rec.events.append(ModelStep([TextBlock(text=str(args.get("content", "")))], model=model))
    else:
        rec.skipped[f"openhands event {action or observation!r} from {source!r}"] += 1


def _tool_call(
    ev: dict[str, Any],
    action: Any,
    meta: dict[str, Any],
    args: dict[str, Any],
    rec: Recording,
    steps: dict[str, ModelStep],
    model: str,
    where: Where,
) -> None:
    """An action the model chose: a tool call, added to the step of the response it came in (the
    first action of a response opens that step, with the response's text and usage)."""
    response = obj(meta.get("model_response"), where, "model_response")
    rid = str(response.get("id") or ev.get("id"))
    choices = array(response.get("choices"), where, "model_response.choices") or [{}]
    message = obj(obj(choices[0], where, "choices[0]").get("message"), where, "choices[0].message")
    step = steps.get(rid)
    if step is None:
        text = message.get("content") or ""
        step = steps[rid] = ModelStep(
            [TextBlock(text=str(text))] if text else [],
            model=str(response.get("model") or model),
            provider="openrouter",
            usage=openai_usage(response.get("usage"), where),
        )
        rec.events.append(step)
    call_id = str(meta.get("tool_call_id"))
    calls = [obj(c, where, "a tool call") for c in array(message.get("tool_calls"), where, "tool_calls")]
    raw = next(
        (
            obj(c.get("function"), where, "a tool call's function").get("arguments")
            for c in calls
            if c.get("id") == call_id
        ),
        None,
    )
    inp, ok = (
        arguments(raw, where)
        if raw is not None
        else ({k: v for k, v in args.items() if k != "thought"}, True)
    )
    if not ok:
        rec.skipped[RAW_ARGUMENTS] += 1
    step.blocks.append(ToolUseBlock(id=call_id, name=str(meta.get("function_name", action)), input=inp))


def _tool_output(ev: dict[str, Any], observation: Any, meta: dict[str, Any], where: Where) -> ToolOutput:
    """An observation answering a call: a command's output keeps the prefix and suffix the agent added
    (its exit-code line)."""
    md = obj(obj(ev.get("extras"), where, "extras").get("metadata"), where, "extras.metadata")
    body = (
        f"{md.get('prefix') or ''}{ev.get('content', '')}{md.get('suffix') or ''}"
        if observation == "run"
        else str(ev.get("content", ""))
    )
    return ToolOutput(
        str(meta.get("tool_call_id")),
        str(meta.get("function_name", observation)),
        body,
        observation == "error",
    )


FORMAT = ImportFormat(NAME, sniff, parse)
