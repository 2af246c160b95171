"""Which part of the engine's request decides a model's answer: the engine's first request for a BFCL
single-turn entry after K tokens of history (``bench/bfcl_history.py``'s engine mode), sent again with one
part taken out or changed (``bench/bfcl_parts.py``; docs/BENCHMARKS.md, "A real model after long real
history"). Pure: the request's variants; the driver builds the request and sends them.

The request is an OpenAI chat body as the caller's loop hands it over: the system prompt, the earlier
turns as the planner placed them (messages between the first and the last), and the current turn's user
message, whose first text block is the tail (``<turn_context>``, ``<stance>``, ``<thread>``, ...) and
whose last is the question. The variants (``VARIANTS``, in this order):

* ``as sent``: the body unchanged;
* ``no thread``: the tail's ``<thread>`` block taken out;
* ``no thread or stance``: the ``<stance>`` block too;
* ``no earlier turns``: only the system prompt and the current turn;
* ``earlier turns as cards``: the earlier turns' messages replaced by their cards (the engine's own
  rendering of each closed turn, ``render_card``), as text at the head of the current user turn.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

VARIANTS = ("as sent", "no thread", "no thread or stance", "no earlier turns", "earlier turns as cards")


def _drop_block(body: dict[str, Any], tag: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    content = out["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    for block in blocks:
        if block.get("type") == "text":
            block["text"] = re.sub(rf"<{tag}>.*?</{tag}>\n?", "", block["text"], flags=re.S)
    out["messages"][-1]["content"] = blocks
    return out


def variants(body: dict[str, Any], cards: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each of :data:`VARIANTS` of ``body`` (the engine's request), ``cards`` being the rendered cards of
    the turns its earlier messages show. The body is not changed."""
    messages = body["messages"]
    if len(messages) < 2 or messages[0].get("role") != "system" or messages[-1].get("role") != "user":
        raise ValueError("the engine's request: a system prompt first and the current user turn last")
    no_thread = _drop_block(body, "thread")
    bare = copy.deepcopy(body)
    bare["messages"] = [messages[0], messages[-1]]
    carded = copy.deepcopy(bare)
    last = carded["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    last["content"] = ([{"type": "text", "text": "\n".join(cards) + "\n"}] if cards else []) + content
    return {"as sent": copy.deepcopy(body), "no thread": no_thread,
            "no thread or stance": _drop_block(no_thread, "stance"), "no earlier turns": bare,
            "earlier turns as cards": carded}
