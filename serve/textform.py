"""Tool exchanges a client writes as text, read as the reply and the result they are (pure).

Some agents keep their calls and their results as plain messages instead of the protocol's own (native
calls, ``tool`` messages, ``tool_result`` blocks): smolagents' ``ToolCallingAgent`` sends each reply it got
back as assistant text ``Calling tools:\\n[{'id': ..., 'type': 'function', 'function': {...}}]`` and each
result as a user message ``Observation:\\n...``. Read as written, every such result is the user's words: a
directive carried whole in every later request, where a native result is evidence, digested once its turn
has closed. So the neutral history reads them as what they are, by one rule (docs/INTEGRATIONS.md):

* an assistant message with no native calls whose text has a line ``Calling tools:`` followed, to the end
  of the text, by a list of calls in OpenAI's shape (each an object with ``id`` and ``function``, which has
  ``name`` and ``arguments``: an object, or a JSON string of one), written as JSON or as a Python literal,
  is a reply making those calls (the text before that line is its text), when it names exactly one call
  and the client's next message is that call's result;
* that result is a user message that begins ``Observation:`` (the result is what follows the marker), or
  ``Call id: <the call's id>`` then a line beginning ``Error:`` (an error result: what follows the id's
  line). It runs to the end of the message or to the last line that is ``New task:``; from that line on,
  the rest is a user message of its own (smolagents merges consecutive messages of one role, so its next
  question arrives inside the last observation); so is, from its ``Error:`` line on, the message smolagents
  adds after a step whose output it could not parse (``Error:``, the error, ``Now let's retry: take care
  not to repeat previous errors!``), which arrives inside the observation before it.

Anything else stays as written, a reply naming several calls too: one observation then holds every call's
result, in no order a reader can split, so it stays the client's words (quoted into the next directive,
as before). Only the history the engine reads changes: what the client is answered is the upstream's.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vak_context.serve.params import FAMILY, with_client_params
from vak_context.serve.protocol import ClientCall, ClientRequest, Item

CALLS_MARKER = "Calling tools:"
OBSERVATION = "Observation:"
ERROR_LINE = "Error:"
NEW_TASK = "New task:"
_CALLS = re.compile(rf"(?:^|\n){re.escape(CALLS_MARKER)}[ \t]*\n")
_NEW_TASK = re.compile(rf"\n{re.escape(NEW_TASK)}[ \t]*(?:\n|$)")
# smolagents' message after a step that failed (its model's output did not parse), merged into the result
# before it: from its "Error:" line on, the rest is a user message of its own
_RETRY = re.compile(r"\nError:\n(?:(?!\nObservation:).)*?\nNow let's retry: take care not to repeat previous errors!", re.S)
_MAX_LIST = 200_000  # characters of a calls list worth parsing (a reply's calls are short)


def with_text_exchanges(request: ClientRequest) -> ClientRequest:
    """``request`` with its history's text-form exchanges read (:func:`read_text_exchanges`)."""
    items = read_text_exchanges(request.items)
    return request if items == request.items else replace(request, items=items, text_exchanges=True)


def read_text_exchanges(items: Sequence[Item]) -> tuple[Item, ...]:
    """``items`` with each text-form exchange (the rule above) read as a reply with its call and the call's
    result, and a new task that arrived inside the result as a user message after it."""
    return exchanges_from(items, Exchanged())[0]


@dataclass(frozen=True)
class Exchanged:
    """Where reading a history's text-form exchanges stood before its last item: items ``[:at]`` read as
    ``out``. Reading never looks further than the item after the one it stands at, so a longer history that
    begins with those items reads on from here (``serve/reading.py``) as it would from its start."""

    at: int = 0
    out: tuple[Item, ...] = ()


def exchanges_from(items: Sequence[Item], start: Exchanged) -> tuple[tuple[Item, ...], Exchanged]:
    """``read_text_exchanges`` of ``items``, whose first ``start.at`` read as ``start.out``; and where it
    stood before its last item (what ``items`` extended reads on from)."""
    out = list(start.out)
    at, mark = start.at, None
    while at < len(items):
        if mark is None and at + 1 >= len(items):
            mark = Exchanged(at, tuple(out))
        item = items[at]
        reply = _reply_of(item)
        result = _result_of(reply, items[at + 1]) if reply is not None and at + 1 < len(items) else None
        if reply is None or result is None:
            out.append(item)
            at += 1
            continue
        out += [reply, *result]
        at += 2
    return tuple(out), mark or Exchanged(at, tuple(out))


def _reply_of(item: Item) -> Item | None:
    """The reply a text-form assistant message is: its text before the marker, its one call."""
    if item.role != "assistant" or item.calls:
        return None
    found = _last(_CALLS, item.text)  # what follows the last marker is the calls list
    if found is None:
        return None
    listed = item.text[found.end():].strip()
    if not listed.startswith("[") or len(listed) > _MAX_LIST:
        return None
    calls = _calls(_literal(listed))
    if calls is None or len(calls) != 1:
        return None
    return Item("assistant", item.text[:found.start()].strip(), tuple(calls))


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)  # literals only: nothing in it runs
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _calls(value: Any) -> list[ClientCall] | None:
    if not isinstance(value, list):
        return None
    calls = []
    for raw in value:
        function = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(function, Mapping):
            return None
        call_id, name, arguments = raw.get("id"), function.get("name"), function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                return None
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name
                and isinstance(arguments, Mapping)):
            return None
        calls.append(ClientCall(call_id, name, dict(arguments)))
    return calls


def _result_of(reply: Item, item: Item) -> list[Item] | None:
    """The result ``item`` is of ``reply``'s one call (and the new task after it), or None."""
    if item.role != "user":
        return None
    call, text = reply.calls[0], item.text
    if text.startswith(OBSERVATION):
        body, is_error = text[len(OBSERVATION):].removeprefix("\n"), False
    else:
        head, _, rest = text.partition("\n")
        if head.strip() != f"Call id: {call.id}" or not rest.startswith(ERROR_LINE):
            return None
        body, is_error = rest, True
    found = _last(_NEW_TASK, body)
    body, task = (body, None) if found is None else (body[:found.start()], Item("user", body[found.start() + 1:]))
    retry = _RETRY.search(body)  # a failed step's error after the result, merged in: the client's words
    if retry is not None:
        body, error = body[:retry.start()], Item("user", body[retry.start() + 1:])
    out = [Item("tool", body, call_id=call.id, is_error=is_error)]
    return out + ([error] if retry is not None else []) + ([task] if task is not None else [])


# ---------------------------------------------------------------- writing them back


def client_form(body: Mapping[str, Any], wire: str, request: ClientRequest) -> dict[str, Any]:
    """The upstream's ``body`` (for an upstream speaking ``wire``) as the client would send it: its
    generation settings (``serve/params.py``), and its exchanges in the text form it keeps them in, where it
    does (``as_text_exchanges``; on an OpenAI-compatible upstream)."""
    out = with_client_params(body, wire, request.protocol, request.params)
    if request.text_exchanges and wire in FAMILY["openai"] and isinstance(out.get("messages"), list):
        out["messages"] = as_text_exchanges(out["messages"])
    return out


def as_text_exchanges(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """An OpenAI-shaped request's ``messages`` with each native exchange written back in the text form the
    client keeps (the rule above, the other way), as smolagents 1.26 writes it: an assistant message's
    ``tool_calls`` become its text (stripped), a newline, the ``Calling tools:`` line and the calls list (a
    Python literal, arguments as an object), each ``tool`` message a user message ``Observation:`` and the
    result, each one text part.

    What the model reads then has the form of the client's own history: shown its exchanges as native calls
    instead, the bundled model answered a smolagents run in plain text, which smolagents cannot parse, where
    in the client's form it called ``final_answer`` (docs/INTEGRATIONS.md)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role, calls = message.get("role"), message.get("tool_calls")
        if role == "assistant" and isinstance(calls, list) and calls:
            listed = [{"id": c.get("id", ""), "type": "function",
                       "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"])}}
                      for c in calls]
            # smolagents' bytes: the reply's text (stripped; "" when it had none) and its calls message, which it
            # joins with a newline, each as one text part
            text = f"{_plain(message.get('content')).strip()}\n{CALLS_MARKER}\n{listed!r}"
            written = {k: v for k, v in message.items() if k != "tool_calls"}
            written["content"] = [{"type": "text", "text": text}]
            out.append(written)
        elif role == "tool":
            out.append({"role": "user",
                        "content": [{"type": "text", "text": f"{OBSERVATION}\n{_plain(message.get('content'))}"}]})
        else:
            out.append(dict(message))
    return out


def _arguments(function: Mapping[str, Any]) -> Any:
    raw = function.get("arguments")
    if isinstance(raw, str):
        try:
            return json.loads(raw or "{}")
        except ValueError:
            return raw
    return raw


def _plain(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""
