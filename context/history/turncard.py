"""TurnCard (spec §10): the deterministic record of a closed turn, and the text a model sees of it.

Closing a turn never calls a model: every field comes from the turn's entries.

* ``asked``: the directive verbatim when it is short (about 60 tokens at the profile's
  tokens_per_char), else its first sentence and a gist (its size and its key terms).
* ``did``: one TraceLine per tool call that is not an ``emit_*_card``: the tool, a digest of its
  arguments, the evidence id and the result's shape.
* ``answered``: the turn's presentations in emit order, and the narration: the final answer's
  prose (minus ```vak fences that repeat a card), verbatim at 60 words or fewer, else its leading
  sentence, cut at a sentence boundary (. ! ?), never at a character count.
* ``outcome``: completed, degraded, cancelled or failed (see ``derive_outcome``).
* ``tokens_full`` / ``tokens_card``: the full record's and the card's size in tokens.

``render_card`` is the model-visible card, at the spec's size (~80 tokens; issue 26): one line a
tool however often it was called, arguments bounded, the narration folded to one line. It names the
turn number (``recall({"turn": N})``) and every evidence id, so the model can go one level deeper
with ``recall({"id": ...})``. A card longer than its turn's full record is never sent: the planner's
sizes give it the record's size (``vak_context.context.planner.sizes.measure_turn``), so the turn goes Full.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.render import (
    SHORT_ID,
    EvidenceInfo,
    is_card_tool,
    record_chars,
    render_turn,
    strip_card_fences,
)
from vak_context.context.history.turns import Exchange, Turn, TurnIndex
from vak_context.events.payloads import Answer, PresentationRef, ReadingKey, TraceLine, TurnCard

NARRATION_WORDS = 60  # spec §10: verbatim when short (≤ 60 words)
ASKED_TOKENS = 60  # spec §10: the directive verbatim if ≤ ~60 tokens
GIST_TERMS = 8
ARG_CHARS = 200  # an argument string up to this is shown whole in the args digest

Outcome = Literal["completed", "degraded", "cancelled", "failed"]

# A sentence ends at . ! or ? (closing quotes/brackets may follow) before whitespace or the end,
# or at a blank line; common abbreviations do not end one.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*(?=\s|\Z)|\n[ \t]*\n")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Mr.", "Mrs.", "Ms.", "Dr.", "St.", "No.", "approx.")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*[A-Za-z0-9_]|[A-Za-z]{2,}")
_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just let like make me more most
my myself need no nor not now of off on once only or other our ours ourselves out over own please same she should
so some such than that the their theirs them themselves then there these they this those through to too under
until up use very was we were what when where which while who whom why will with would you your yours yourself
yourselves want see find show tell give get""".split()
)


# ------------------------------------------------------------------ text rules


def leading_sentence(text: str) -> str:
    """The text up to its first sentence boundary (. ! ? or a blank line); all of it if it has none."""
    stripped = text.strip()
    for m in _BOUNDARY.finditer(stripped):
        candidate = stripped[: m.end()].rstrip()
        if candidate.endswith(_ABBREVIATIONS) and m.group(0).strip() == "":
            continue
        if candidate:
            return candidate
    return stripped


def word_count(text: str) -> int:
    return len(text.split())


def narration_of(text: str, word_limit: int = NARRATION_WORDS) -> str:
    """Verbatim at ``word_limit`` words or fewer; otherwise the leading sentence."""
    stripped = text.strip()
    if word_count(stripped) <= word_limit:
        return stripped
    return leading_sentence(stripped)


def key_terms(text: str, limit: int = GIST_TERMS) -> list[str]:
    """The most frequent content words of ``text`` (ties by first appearance): a deterministic gist."""
    words = [w for w in _WORD.findall(text) if w.lower() not in _STOPWORDS and len(w) > 2]
    counts = Counter(w.lower() for w in words)
    first: dict[str, str] = {}
    for w in words:
        first.setdefault(w.lower(), w)
    order = {k: i for i, k in enumerate(first)}
    ranked = sorted(counts, key=lambda k: (-counts[k], order[k]))
    return [first[k] for k in ranked[:limit]]


def asked_of(text: str, tokens_per_char: float, token_limit: int = ASKED_TOKENS) -> str:
    """The directive verbatim when it is about ``token_limit`` tokens or fewer; else first sentence + gist.

    The gist names what the rest holds: its size and its key terms. A first sentence that is itself
    far over the budget (a pasted log with no boundary) is shown by its first words and its size;
    the directive stays whole in the full record (recall({turn})).
    """
    stripped = text.strip()
    if estimate_tokens(len(stripped), tokens_per_char) <= token_limit:
        return stripped
    first = leading_sentence(stripped)
    budget_words = max(8, int(token_limit * 2 / 1.3))  # at most about twice the budget, in words
    words = first.split()
    if len(words) > budget_words:
        first = " ".join(words[:budget_words]) + f" … ({len(words)} words)"
    rest = stripped[len(leading_sentence(stripped)) :]
    terms = key_terms(rest)
    gist = f"[+{word_count(rest)} more words"
    gist += f"; key terms: {', '.join(terms)}]" if terms else "]"
    return f"{first} {gist}"


def args_digest(args: Mapping[str, Any]) -> str:
    """``key=value`` for each argument, in key order: short values whole, long strings named by size."""
    parts = []
    for key in sorted(args):
        value = args[key]
        if isinstance(value, str):
            if len(value) <= ARG_CHARS and "\n" not in value:
                shown = json.dumps(value, ensure_ascii=False)
            else:
                first_line = value.strip().splitlines()[0] if value.strip() else ""
                words = " ".join(first_line.split()[:8])
                shown = f"<{len(value)} chars: {json.dumps(words, ensure_ascii=False)}…>"
        else:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            if len(text) <= ARG_CHARS:
                shown = text
            elif isinstance(value, list):
                shown = f"<list of {len(value)}>"
            elif isinstance(value, dict):
                shown = f"<object with keys {', '.join(sorted(map(str, value))[:8])}>"
            else:
                shown = f"<{len(text)} chars>"
        parts.append(f"{key}={shown}")
    return ", ".join(parts)


def short_id(entry_id: str | None) -> str:
    return (entry_id or "")[:SHORT_ID]


# ------------------------------------------------------------------ the card


def derive_outcome(index: TurnIndex, turn: Turn) -> Outcome:
    """completed: the last step answered in prose (it made no call that was then answered);
    cancelled: the user interrupted the turn, or it has no step at all; degraded: it stopped mid-work."""
    tags = {c.tag for c in index.controls if c.id in set(turn.controls)}
    if "interrupt" in tags or not turn.steps:
        return "cancelled"
    last = turn.steps[-1]
    if last.text.strip() and all(ex.result is None for ex in last.exchanges):
        return "completed"
    return "degraded"


def _trace_shape(ex: Exchange, evidence: Mapping[str, EvidenceInfo]) -> str:
    """The result's shape; ``none`` for a call never answered, ``inline`` for a result with no body."""
    if ex.evidence_id is not None and ex.evidence_id in evidence:
        return evidence[ex.evidence_id].shape
    return "none" if ex.result is None else "inline"


def build_card(
    index: TurnIndex,
    turn: Turn,
    evidence: Mapping[str, EvidenceInfo],
    *,
    outcome: Outcome | None = None,
    reading: ReadingKey | None = None,
) -> TurnCard:
    """The TurnCard of ``turn``. ``evidence`` maps evidence ids to their digests (from the bodies)."""
    tpc = index.tokens_per_char
    did = tuple(
        TraceLine(
            tool=ex.tool_name,
            args_digest=args_digest(ex.input),
            evidence_id=ex.evidence_id,
            shape=_trace_shape(ex, evidence),
        )
        for ex in turn.exchanges
        if not is_card_tool(ex.tool_name)
    )
    refs = tuple(
        PresentationRef(
            id=pid,
            semantic_type=p.semantic_type,
            title=p.title,
            digest=p.identity_digest,
            derived_from=p.derived_from,
        )
        for pid, p in ((pid, turn.presentation_payloads[pid]) for pid in turn.presentations)
    )
    narration = ""
    if turn.steps and turn.steps[-1].text.strip():
        last = turn.steps[-1]
        prose = strip_card_fences(last.text, last.id, turn.presentation_payloads, set())
        narration = narration_of(prose)
    full = estimate_tokens(record_chars(render_turn(turn, evidence)), tpc)
    card = TurnCard(
        turn_id=turn.id,
        asked=asked_of(turn.directive.text, tpc),
        did=did,
        answered=Answer(presentations=refs, narration=narration),
        outcome=outcome or derive_outcome(index, turn),
        reading=reading or ReadingKey(),
        tokens_full=full,
        tokens_card=0,
    )
    return card.model_copy(update={"tokens_card": estimate_tokens(len(render_card(card, turn.ordinal)), tpc)})


def render_card(card: TurnCard, ordinal: int | None = None) -> str:
    """The card as the model reads it: what was asked, done and answered, with every id to recall.

    Sized for a small model's history (spec §10: ~80 tokens): the recall pointer rides on the head
    line; every call of one tool is one line (its count, its calls' arguments, bounded, and all its
    evidence ids in one tag); the stored narration is shown by the narration rule, whitespace folded.
    A card longer than ``CARD_CHARS`` so shown is shown at the first of ``CARD_LEVELS`` that fits (or
    the last): the narration cut at a word to a fixed size, ``… [+N more words]`` saying how much
    follows, and the calls' arguments bounded tighter. Nothing stored is dropped: the full record is
    ``recall({"turn": N})`` away, every evidence id and presentation id is on the card at every level,
    and the stored card keeps the narration whole. The reading stays in the stored card (the card
    index's key, never shown in its text). Rendered from the stored fields alone, so an old ledger's
    cards render the same way.
    """
    if (hit := _RENDERED.get(key := (id(card), ordinal))) is not None and hit[0] is card:
        return hit[1]
    text = ""
    for level in CARD_LEVELS:
        text = _render(card, ordinal, level)
        if len(text) <= CARD_CHARS:
            break
    if len(_RENDERED) >= RENDERED_MAX:
        _RENDERED.clear()
    _RENDERED[key] = (card, text)
    return text


# Rendered cards by (card object, ordinal), each entry holding its (frozen) card so no id is reused while cached:
# a step's request carries hundreds of cards at 1,000 turns, and rendering them every step was most of a step.
RENDERED_MAX = 16_384
_RENDERED: dict[tuple[int, int | None], tuple[TurnCard, str]] = {}


@dataclass(frozen=True)
class CardLevel:
    """How much of its longest fields a card shows: the narration's characters (``None``: by the
    narration rule alone), one call's argument digest, all the calls of one tool line together, and
    the asked text's characters (``None``: as stored, by the asked rule)."""

    narration_chars: int | None
    call_args_chars: int
    group_args_chars: int
    asked_chars: int | None = None


CALL_ARGS_CHARS = 60  # one call's argument digest, as a card shows it (whole in the full record)
GROUP_ARGS_CHARS = 140  # all the calls of one tool line together; the rest are counted
# A card is ~80 tokens in the spec's 31-turn shape (spec §10): 360 characters is 90 tokens at a small
# model's 0.25 tokens a character. A card within it shows everything; a longer one (a tool-heavy turn
# with a quoting answer: generated sessions' cards were ~150 tokens) shows its narration and arguments
# at the first level that fits, the last one when none does.
CARD_CHARS = 360
CARD_LEVELS = (
    CardLevel(None, CALL_ARGS_CHARS, GROUP_ARGS_CHARS),
    CardLevel(160, 48, 100),
    CardLevel(100, 36, 72, 80),
    CardLevel(60, 28, 56, 64),
    CardLevel(32, 20, 40, 48),
)


def _render(card: TurnCard, ordinal: int | None, level: CardLevel) -> str:
    recall = f'recall({{"turn": {ordinal}}})' if ordinal is not None else "recall({turn})"
    head = f"Turn {ordinal}" if ordinal is not None else f"Turn {short_id(card.turn_id)}"
    lines = [f"{head} ({card.outcome}; {recall}). Asked: {_bounded_words(_folded(card.asked), level.asked_chars)}"]
    lines.extend(_did_line(tool, calls, level) for tool, calls in _grouped(card.did))
    for p in card.answered.presentations:
        digest = _presentation_digest(p)
        shown = f'- card {p.semantic_type} "{p.title}" [presentation:{short_id(p.id)}]'
        lines.append(f"{shown}: {digest}" if digest else shown)
    narration = _folded(narration_of(card.answered.narration)).replace("**", "")  # bold marks: form, not fact
    if narration:
        lines.append(f"Answered: {_bounded_words(narration, level.narration_chars)}")
    return "\n".join(lines)


def _bounded_words(text: str, limit: int | None) -> str:
    """``text`` whole within ``limit`` characters; else its words up to about ``limit``, then
    ``… [+N more words]`` (the whole is in the stored card and the record). Whole too when the cut
    form would be no shorter."""
    if limit is None or len(text) <= limit:
        return text
    words = text.split(" ")
    shown, size = 1, len(words[0])
    while shown < len(words) and size + 1 + len(words[shown]) <= limit:
        size += 1 + len(words[shown])
        shown += 1
    cut = " ".join(words[:shown]) + f" … [+{len(words) - shown} more words]"
    return cut if len(cut) < len(text) else text


_EVIDENCE_TAG = re.compile(r"\[evidence:([0-9a-f ]+)\]")


def card_evidence_ids(text: str) -> list[str]:
    """The short evidence ids a rendered card names, in order (``[evidence:a]`` and ``[evidence:a b c]``)."""
    return [eid for m in _EVIDENCE_TAG.finditer(text) for eid in m.group(1).split()]


def _folded(text: str) -> str:
    """Whitespace runs (line breaks of a markdown list) as one space: a card is one line per fact."""
    return " ".join(text.split())


def _presentation_digest(ref: PresentationRef) -> str:
    """The identity digest on one line, ``key: value`` parts joined by ``; ``, without the part that
    only repeats the card's title (a metric's label is its title). A digest stored as a JSON object
    (the session generator's) is read as its fields."""
    lines = ref.digest.splitlines()
    if ref.digest.startswith("{"):
        try:
            value = json.loads(ref.digest)
        except ValueError:
            value = None
        if isinstance(value, dict):
            lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
                     for k, v in value.items()]
    kept = [line for line in lines if line.partition(": ")[2].strip() != ref.title.strip()]
    return _folded("; ".join(kept))


def _grouped(did: tuple[TraceLine, ...]) -> list[tuple[str, list[TraceLine]]]:
    """The trace lines by tool, tools in order of first call, calls in order."""
    groups: dict[str, list[TraceLine]] = {}
    for t in did:
        groups.setdefault(t.tool, []).append(t)
    return list(groups.items())


_IDENTITY = re.compile(r"(^|_)(id|ids|key|token|name|path|file|url|query|q|command|cmd|pattern)$", re.IGNORECASE)
_PART = re.compile(r"(?:^|, )([A-Za-z_][\w.\-]*)=")


def _arg_parts(digest: str) -> list[tuple[str, str]]:
    """A stored ``key=value, key=value`` digest as (key, part) pairs. A digest stored as a JSON
    object (the session generator's) is read as its keys and values; any other form is one part."""
    if digest.startswith("{"):
        try:
            value = json.loads(digest)
        except ValueError:
            value = None
        if isinstance(value, dict) and value:
            return [(str(k), f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'))}")
                    for k, v in value.items()]
    starts = list(_PART.finditer(digest))
    if not starts or starts[0].start() != 0:
        return [("", digest)]
    out = []
    for m, nxt in zip(starts, [*starts[1:], None], strict=True):
        begin = m.start() + (2 if m.start() else 0)
        out.append((m.group(1), digest[begin : nxt.start() if nxt is not None else len(digest)]))
    return out


def bounded_args(digest: str, limit: int = CALL_ARGS_CHARS) -> str:
    """A stored args digest cut to about ``limit`` characters. Identity arguments (ids, keys and tokens,
    names, paths, queries, commands: what tells one call from another, what later calls reuse) come first, then the rest in stored order,
    whole while they fit; ``…`` marks the rest. The first is cut with ``…`` when it alone is longer,
    unless it is an identity argument within ``CALL_ARGS_CHARS``: a cut id or path names nothing."""
    parts = _arg_parts(_folded(digest))
    text = ", ".join(p for _, p in parts)
    if len(text) <= limit:
        return text
    identity = [p for k, p in parts if _IDENTITY.search(k)]
    ordered = identity + [p for k, p in parts if not _IDENTITY.search(k)]
    shown = identity[0] if identity and len(identity[0]) <= CALL_ARGS_CHARS else ""
    for part in ordered[1:] if shown else ordered:
        candidate = f"{shown}, {part}" if shown else part
        if len(candidate) > limit:
            break
        shown = candidate
    return (shown or ordered[0][: max(1, limit - 1)].rstrip()) + "…"


def _call_args(calls: list[TraceLine], level: CardLevel = CARD_LEVELS[0]) -> list[str]:
    """Each call's bounded digest, identical ones once; calls that differ in one argument alone
    (``reservation_id="A"``, ``reservation_id="B"``) as that key once and the values (``key=A|B``)."""
    digests = list(dict.fromkeys(bounded_args(t.args_digest, level.call_args_chars) for t in calls))
    split = [_arg_parts(d) for d in digests]
    if len(digests) > 1 and all(len(p) == 1 and p[0][0] for p in split) and len({p[0][0] for p in split}) == 1:
        key = split[0][0][0]
        values = [p[0][1][len(key) + 1 :] for p in split]
        shown = values[:1]
        for v in values[1:]:
            if len(key) + 1 + len("|".join([*shown, v])) > level.group_args_chars:
                break
            shown.append(v)
        more = f"|+{len(values) - len(shown)} more" if len(shown) < len(values) else ""
        return [key + "=" + "|".join(shown) + more]
    return digests


def _did_line(tool: str, calls: list[TraceLine], level: CardLevel = CARD_LEVELS[0]) -> str:
    """One line for every call of ``tool``: ``- tool ×n(args; args; +k more) → shapes [evidence:ids]``."""
    digests = _call_args(calls, level)
    shown: list[str] = []
    for d in digests:
        if shown and len("; ".join([*shown, d])) > level.group_args_chars:
            break
        shown.append(d)
    if len(shown) < len(digests):
        shown.append(f"+{len(digests) - len(shown)} more")
    shapes = Counter(t.shape for t in calls)
    shape = ", ".join(s if n == len(calls) or n == 1 else f"{s} ×{n}" for s, n in shapes.items())
    ids = [short_id(t.evidence_id) for t in calls if t.evidence_id]
    ev = f" [evidence:{' '.join(ids)}]" if ids else ""
    count = f" ×{len(calls)}" if len(calls) > 1 else ""
    return f"- {tool}{count}({'; '.join(shown)}) → {shape}{ev}"


def index_text(card: TurnCard, presentations: Mapping[str, Any] | None = None) -> str:
    """What the card index searches (spec §10): asked, each presentation's title, labels, values and
    takeaways, the narration, and the trace's tool names and arguments."""
    parts = [card.asked]
    for ref in card.answered.presentations:
        parts.append(ref.title)
        payload = (presentations or {}).get(ref.id)
        parts.extend(_card_terms(payload) if payload is not None else [ref.digest])
    parts.append(card.answered.narration)
    for t in card.did:
        parts.append(f"{t.tool} {t.args_digest}")
    return "\n".join(p for p in parts if p)


_CARD_FIELDS = frozenset(
    {
        "title",
        "label",
        "value",
        "unit",
        "takeaways",
        "question",
        "name",
        "type",
        "fields",
        "columns",
        "accessible_summary",
        "caption",
        "summary",
        "when",
        "as_of",
        "change",
        "x_label",
        "y_label",
        "items",
        "series",
        "sources",
    }
)


def _card_terms(payload: Any) -> list[str]:
    """Labels, values and takeaways of a card payload: the structured fields, not the prose body."""
    out: list[str] = []

    def walk(value: Any, key: str | None) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if key == "fields":  # entity attributes: name and value both identify
                    out.append(str(k))
                    walk(v, "value")
                elif k in _CARD_FIELDS and k not in ("url", "snippet", "points", "body"):
                    walk(v, k)
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
        elif value is not None and not isinstance(value, bool):
            out.append(str(value))

    walk(payload, None)
    return out
