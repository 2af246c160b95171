"""The optional model pass at turn close: its prompt, when the profile allows it, and the strict reading of
its answer (docs/STATE.md "The model pass"). Pure.

The deterministic pass (``context/stated/extract.py``) reads a directive by its patterns; a phrasing they do
not know binds later turns all the same. The model pass asks a model (the packet summariser's) for the
statements of the closing turn's directive that bind later turns, given the items the deterministic pass
already found. The model may find and classify, never word: an item is kept only where its text is a
verbatim span of the directive's readable lines (whitespace normalised; code blocks and quoted results left
out, as the deterministic pass leaves them), so nothing the user did not say is ever shown as stated.

Its key is the engine's, as the deterministic pass keys a sentence of that category
(:func:`~vak_context.context.stated.extract.classify`): a key the model proposes is read and not used, since
a wrong one would take an item in force out. An item the deterministic pass found (the same words, words
inside or around them, or the same key) or one in force with the same words is a duplicate: the pass's stands.
An answer that is not a JSON array or JSON lines of objects is malformed and yields nothing.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.stated.extract import MAX_CHARS, MAX_ITEMS, Draft, classify, readable_lines
from vak_context.context.stated.items import CATEGORIES, StatedItem

STATED_SYSTEM = ("You read one message a user wrote to an assistant and list the statements in it that bind the "
                 "assistant's later work. You copy the user's words exactly; you never reword, shorten, merge or add.")
MAX_DIRECTIVE_CHARS = 12_000  # a longer message is a pasted document, not a list of rules: no pass
ANSWER_CAP = 768  # the answer's tokens at most: MAX_ITEMS statements of a sentence each, as JSON
PROMPT_OVERHEAD = 64  # the chat template's tokens around the system prompt and the message

# What a model may call a category, beside the five names (the labels the deterministic pass reads).
_ALIASES = {"prohibition": "rule", "safety rule": "rule", "policy": "rule", "hard constraint": "constraint",
            "limit": "constraint", "budget": "constraint", "deadline": "constraint", "goal state": "goal",
            "progress": "goal", "task state": "goal", "next step": "goal", "user preference": "preference"}
_FENCE = re.compile(r"^```[\w-]*\s*\n(?P<body>.*)\n```$", re.DOTALL)
_WORDS = re.compile(r"[^\W\d_]{2,}")


def readable(directive: str) -> str:
    """The directive's text the pass reads and takes spans from (``extract.readable_lines``), one line each."""
    return "\n".join(readable_lines(directive))


def stated_prompt(text: str, found: Sequence[str]) -> str:
    """The pass's user message: the directive's readable ``text`` and the items already ``found`` in it."""
    lines = [
        "The user's message, between the lines <<< and >>>:", "<<<", text, ">>>", "",
        "List each statement in it that the assistant must keep to in later turns, with its category:",
        "- rule: a rule or a prohibition (what must always or never be done)",
        "- constraint: a hard constraint, a limit, a budget or a deadline",
        "- goal: the goal of the work, its progress, or the next step",
        "- fact: a fact about the task or its environment",
        "- preference: how the user likes things done",
    ]
    if found:
        lines += ["", "Already recorded: do not list these again:", *(f"- {t}" for t in found)]
    lines += [
        "", 'Answer with a JSON array only, one object per statement: {"category": "...", "text": "..."}. '
        "The text is the statement copied exactly from the message: the user's words, whole, unchanged. "
        "Answer [] when the message states nothing more (a question or a request for this turn only binds nothing).",
    ]
    return "\n".join(lines)


def answer_tokens(text: str, tokens_per_char: float) -> int:
    """The most the answer may need: every readable line copied once, as JSON, within ``ANSWER_CAP``."""
    return min(ANSWER_CAP, estimate_tokens(len(text), tokens_per_char) + 24 * MAX_ITEMS)


def not_allowed(profile: CapacityProfile, request_tokens: int, *, window_tokens: int,
                on_bound_model: bool) -> str | None:
    """Why the profile does not allow the pass (None: it does). The pass's request (``request_tokens``:
    system, prompt and answer) must fit the model's window, and where the pass runs on the bound model, its
    measured instruction horizon (a model does not follow what lies beyond it: the pass would cost a call
    and find nothing it can be trusted with); a bound model the probe found following none of its rungs
    (``passed_any`` False) is not asked. A model never probed is asked (its horizon is the metadata's)."""
    if request_tokens > window_tokens:
        return f"the pass's request ({request_tokens} tokens) is larger than the model's window ({window_tokens})"
    if not on_bound_model:
        return None
    if profile.provenance.passed_any is False:
        return "the probe found the bound model following none of its instructions"
    horizon = profile.instruction_horizon.tokens
    if request_tokens > horizon:
        return f"the pass's request ({request_tokens} tokens) is beyond the bound model's instruction horizon ({horizon})"
    return None


@dataclass(frozen=True)
class Reading:
    """What the answer gave: the items kept (``drafts``), and why the others were not (``rejected``: reason
    to count), or ``malformed`` (nothing kept)."""

    drafts: list[Draft] = field(default_factory=list)
    malformed: str = ""
    rejected: dict[str, int] = field(default_factory=dict)


def read_answer(answer: str, directive: str, found: Sequence[StatedItem],
                current: Sequence[StatedItem] = ()) -> Reading:
    """The answer's items that are verbatim spans of ``directive``'s readable text and new: not found by the
    deterministic pass (``found``: its items of this directive) nor in force with the same words
    (``current``). Keyed as the deterministic pass keys them, against ``current``."""
    objects, malformed = _objects(answer)
    if malformed:
        return Reading(malformed=malformed)
    source = _norm(readable(directive))
    taken = [_norm(it.text).casefold() for it in found]
    taken_keys = {it.key for it in found}
    in_force = {_norm(it.text).casefold() for it in current}
    rejected: Counter[str] = Counter()
    out: list[Draft] = []
    keys: dict[str, int] = {}
    for obj in objects:
        category = _category(obj.get("category"))
        raw = obj.get("text")
        text = _norm(raw) if isinstance(raw, str) else ""
        if category is None or not text:
            rejected["not an item"] += 1
            continue
        if len(text) > MAX_CHARS or len(_WORDS.findall(text)) < 2:
            rejected["not a statement"] += 1
            continue
        if not _span(text, source):
            rejected["not in the directive"] += 1
            continue
        folded = text.casefold()
        if folded in in_force or any(folded in t or t in folded for t in taken):
            rejected["already found"] += 1
            continue
        draft = classify(text, category, tuple(current))
        assert draft is not None  # a labelled sentence is always an item
        if draft.key in taken_keys:  # the deterministic pass's item of that key from this directive stands
            rejected["already found"] += 1
            continue
        if draft.key in keys:  # the same key twice in one answer: the later stands, as in the deterministic pass
            out[keys[draft.key]] = draft
            rejected["restated"] += 1
            continue
        if len(out) >= MAX_ITEMS:
            rejected["over the limit"] += 1
            continue
        keys[draft.key] = len(out)
        out.append(draft)
        taken.append(folded)
    return Reading(out, rejected=dict(rejected))


def _objects(answer: str) -> tuple[list[dict[str, object]], str]:
    """The answer's objects, from a JSON array (one object alone too) or JSON lines, a code fence around
    either allowed; else ([], why it is malformed)."""
    text = answer.strip()
    if m := _FENCE.match(text):
        text = m["body"].strip()
    if not text:
        return [], "an empty answer"
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
        items: list[object] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError:
                return [], "neither a JSON array nor JSON lines"
    else:
        items = whole if isinstance(whole, list) else [whole]
    objects = [o for o in items if isinstance(o, dict)]
    if len(objects) != len(items):
        return [], "an item that is not a JSON object"
    return objects, ""


def _category(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    name = " ".join(value.lower().replace("_", " ").split())
    return name if name in CATEGORIES else _ALIASES.get(name)


def _span(text: str, source: str) -> bool:
    """``text`` occurs in ``source`` whole: at word boundaries, not inside a longer word."""
    at = source.find(text)
    while at >= 0:
        end = at + len(text)
        if (at == 0 or not source[at - 1].isalnum()) and (end == len(source) or not source[end].isalnum()):
            return True
        at = source.find(text, at + 1)
    return False


def _norm(text: str) -> str:
    return " ".join(text.split())
