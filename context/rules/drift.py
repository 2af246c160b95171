"""Turn rules and drift checks (spec §6 "Repeated cards", "Empty steps"; §7 "Drift management"). Pure.

The turn loop calls these at fixed points; each takes the turn's :class:`RuleState` and returns the
next one with a :class:`Verdict` (no clock, no I/O: the loop writes what a verdict says to the ledger).

* :func:`gate_cards` before a step's card calls run: freshness (a live-data directive with nothing
  observed) and topic mismatch (a retrieval succeeded, and the card shares no word with the directive
  plus the retrieved text) intercept a call with an error the model repairs; a second strike closes.
* :func:`note_results` after the calls: successful observation calls (a tool that *declares* it reads
  the world as it is now) and the text they returned.
* :func:`after_cards` after ``present``: a batch whose every card repeats one already shown is a no-op;
  three consecutive such batches close the turn on that card.
* :func:`after_reply` on a step with no tool call: empty step, a copied rule note, a reply that only repeats
  the directive, model drift (a verbatim repeat of a prior turn's narration), freshness of a prose answer;
  otherwise the reply is the answer.

No nudge or intercept error quotes the directive: it names "the user's request above" instead, because
Qwen2.5-Coder-1.5B copied a quoted directive at the end of a nudge as its answer, and later turns copied
that (live runs). The directive stays in its own message, where the model reads it.
* :func:`gate_repeats` before a step's world calls run: a read-only call whose (name, arguments) already
  ran this turn, with no world-changing call since, is not run again; its error result names the earlier
  call. A second such step closes the turn quoting the earlier result (``redo=True``: the first time, it
  asks for the answer now, without tools, and only a third such step closes). :func:`note_calls` after the calls
  remembers what ran (a world-changing call forgets it all: the world may have changed).
* :func:`paused_directives`: thread drift, the earlier directives a change of subject leaves paused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from vak_context.context.history.turncard import narration_of
from vak_context.context.rules.freshness import (
    RecordedFigure,
    accepts_no_live_data,
    fail_closed_statement,
    last_figure,
    seeks_live_value,
)
from vak_context.context.rules.prior import PriorTurn, PriorTurns

REPEAT_BATCHES = 3  # consecutive all-repeat card batches that close the turn on that card
DRIFT_EVENTS = 3  # consecutive model-drift events that end the turn degraded
SHORT_REPLY_WORDS = 3  # a reply of this many words or fewer ("OK.", "Done.") repeated across turns is not drift
# The notes the rules write into the conversation; a reply that starts with one is the model copying it.
RULE_NOTE = re.compile(
    r"\s*\[(empty-step|freshness-check|repeated-call|steering-drift|topic-mismatch|rule-echo|directive-echo)\]")
# Tools whose result cannot change within a turn unless a world-changing call runs: the workspace is
# read-only, recall reads earlier turns, find_tools ranks a fixed catalogue. Only the default of these pure
# functions: the turn loop passes the set its tools declare (ToolDecl.read_only).
READ_ONLY_TOOLS = frozenset({"read_file", "list_dir", "grep", "recall", "find_tools", "session_search"})
EVIDENCE_QUOTE_CHARS = 2_000  # the raw evidence a topic fail-close quotes: a bound on a message, not a cut of data

Action = Literal["continue", "answer", "redo", "close"]


@dataclass(frozen=True)
class RanCall:
    """A read-only call that ran this turn: its (name, arguments) key, its tool_use id and its result."""

    key: str
    name: str
    tool_use_id: str
    body: str


@dataclass(frozen=True)
class RuleState:
    """Everything the rules remember within one turn."""

    directive: str
    live: bool  # the directive seeks a value as it stands now
    observed: bool = False  # an observation call succeeded this turn
    evidence: tuple[str, ...] = ()  # text those observations returned
    succeeded: tuple[str, ...] = ()  # the world tools that succeeded this turn, observing or not (by name)
    observers: tuple[str, ...] = ()  # those whose success counted as an observation
    undeclared: tuple[str, ...] = ()  # of those, the ones that never declared ``observes`` (counted all the same)
    shown: frozenset[str] = frozenset()  # presentation ids acknowledged this turn
    last_card: str = ""
    repeat_batches: int = 0
    empty_redos: int = 0
    echo_redos: int = 0
    directive_echo_redos: int = 0
    freshness_strikes: int = 0
    topic_strikes: int = 0
    drift_events: int = 0
    ran: tuple[RanCall, ...] = ()  # read-only calls run since the turn began or the last world-changing call
    repeat_strikes: int = 0  # steps that repeated a call from ``ran``
    answer_asked: bool = False  # the redo rule already asked for the answer without tools this turn


@dataclass(frozen=True)
class Verdict:
    """What the loop does next. ``tag`` names the rule (the nudge's tag or the activity's name); ``text``
    is the nudge, the intercept error or the system-authored answer; ``outcome`` the TurnCard's."""

    action: Action
    tag: str = ""
    text: str = ""
    outcome: Literal["completed", "degraded", "failed"] = "completed"
    lower_horizon: bool = False  # model drift: fold a failed instruction into the profile


CONTINUE = Verdict("continue")


def start(directive: str) -> RuleState:
    return RuleState(directive=directive, live=seeks_live_value(directive))


# ------------------------------------------------------------------ card calls, before they run


def gate_cards(state: RuleState, cards: Sequence[tuple[int, Mapping[str, Any]]],
               figures: Sequence[RecordedFigure]) -> tuple[RuleState, dict[int, str], Verdict]:
    """Checks a step's card calls (``(position, arguments)``) before they run: the positions to intercept
    with their error text, and a ``close`` verdict when a second strike fails the turn closed."""
    if not cards:
        return state, {}, CONTINUE
    if state.live and not state.observed:
        if state.freshness_strikes >= 1:
            return (replace(state, freshness_strikes=state.freshness_strikes + 1),
                    {i: _FRESHNESS_AGAIN for i, _ in cards},
                    Verdict("close", "freshness-check", freshness_statement(state, figures), "degraded"))
        return replace(state, freshness_strikes=1), {i: freshness_nudge(state) for i, _ in cards}, CONTINUE
    if not state.evidence:
        return state, {}, CONTINUE  # topic mismatch is scoped to turns where a retrieval succeeded
    vocabulary = words(state.directive) | words(" ".join(state.evidence))
    if all(words(_serialize(args)) & vocabulary for _, args in cards):
        return state, {}, CONTINUE
    # The step's cards are held back together: ``present`` writes a step's cards as one batch.
    if state.topic_strikes >= 1:
        return (replace(state, topic_strikes=state.topic_strikes + 1), {i: _TOPIC_AGAIN for i, _ in cards},
                Verdict("close", "topic-mismatch", evidence_statement(state.evidence), "degraded"))
    error = ("[topic-mismatch] a card of this step shares no words with the user's request above or "
             "with what this turn's tools returned; it looks copied from an earlier turn. Build the card from "
             "this turn's results, or answer in prose.")
    return replace(state, topic_strikes=1), {i: error for i, _ in cards}, CONTINUE


_FRESHNESS_AGAIN = ("[freshness-check] still no tool that reads the current state succeeded this turn; the turn "
                    "ends without this card.")
_TOPIC_AGAIN = "[topic-mismatch] a second unrelated card; the turn ends quoting this turn's results instead."


FRESHNESS_NUDGE = ("[freshness-check] the user's request above asks for a value as it stands now, and no tool "
                   "that reads the current state has succeeded in this turn, so any figure in context is from an "
                   "earlier time. Call a tool that observes it first, or say plainly that you have no live data.")
# When tools did succeed this turn, but each declared that it does not read the world as it is now: the
# rule never says that nothing was observed, only that what ran is not declared to read current values.
_DECLARED_NOT_OBSERVING = ("[freshness-check] the user's request above asks for a value as it stands now, and the "
                           "tools that succeeded in this turn ({names}) are declared as not reading the current "
                           "state. Call a tool that observes it, or say plainly that you have no live data.")


def freshness_nudge(state: RuleState) -> str:
    """The freshness rule's nudge: it names the tools that ran when some succeeded (never "nothing ran")."""
    if state.succeeded:
        return _DECLARED_NOT_OBSERVING.format(names=", ".join(dict.fromkeys(state.succeeded)))
    return FRESHNESS_NUDGE


def freshness_statement(state: RuleState, figures: Sequence[RecordedFigure]) -> str:
    """The freshness rule's closing statement: :func:`fail_closed_statement`, or, when some tool succeeded
    this turn, one that names those tools as declared not to read current values."""
    return fail_closed_statement(last_figure(figures), tuple(dict.fromkeys(state.succeeded)))


def evidence_statement(evidence: Sequence[str]) -> str:
    """The system-authored answer of a topic fail-close: this turn's raw results, quoted."""
    return ("The model's cards did not match this turn's results, so none is shown. What the tools returned:\n"
            + quote("\n\n".join(evidence)))


def quote(raw: str) -> str:
    """Raw tool output as a quoted block, bounded at EVIDENCE_QUOTE_CHARS."""
    quoted = raw if len(raw) <= EVIDENCE_QUOTE_CHARS else raw[:EVIDENCE_QUOTE_CHARS] + f"\n[… {len(raw)} chars in all]"
    return "\n".join(f"> {line}" for line in quoted.splitlines())


# ------------------------------------------------------------------ repeated read-only calls


def call_key(name: str, arguments: Mapping[str, Any] | None) -> str:
    """What makes two calls the same call: the name and the arguments, key order aside."""
    return json.dumps([name, arguments], sort_keys=True, default=str)


def gate_repeats(state: RuleState, calls: Sequence[tuple[int, str, Mapping[str, Any] | None]],
                 read_only: frozenset[str] = READ_ONLY_TOOLS, *, redo: bool = False
                 ) -> tuple[RuleState, dict[int, str], Verdict]:
    """Checks a step's world calls (``(position, name, arguments)``, card calls left out) before they run:
    the positions not to run, with the error result each gets, and a ``close`` verdict on the second step
    that repeats. With ``redo`` the second such step gets a ``redo`` verdict instead, once per turn (the
    loop then asks for the answer with calls masked, :data:`ANSWER_NOW`), and the next one closes. A step
    that also makes a world-changing call is not checked (its calls run concurrently, so none is known to
    come before the change)."""
    if not state.ran or any(name not in read_only for _, name, _ in calls):
        return state, {}, CONTINUE
    ran = {c.key: c for c in state.ran}
    earlier = {i: ran[k] for i, name, args in calls if (k := call_key(name, args)) in ran}
    if not earlier:
        return state, {}, CONTINUE
    errors = {i: repeat_error(c) for i, c in earlier.items()}
    strikes = state.repeat_strikes + 1
    state = replace(state, repeat_strikes=strikes)
    if strikes >= 2 and redo and not state.answer_asked:
        return replace(state, answer_asked=True), errors, Verdict("redo", "repeated-call", ANSWER_NOW)
    if strikes >= 2:
        # Quote what the turn found (its successful results), not only the calls repeated: a model that
        # loops on failing calls (recalling an id that is not one) must not turn the answer into its errors.
        found = set(state.evidence)
        good = [c for c in state.ran if c.body in found]
        return state, errors, Verdict("close", "repeated-call", repeat_statement(good or earlier.values()), "degraded")
    return state, errors, CONTINUE


# The redo rule's nudge: the step after it is sent with calls masked (tool_choice none, and on llama.cpp a
# grammar without the characters a call opens with), so the model can only write the answer.
ANSWER_NOW = ("[repeated-call] you have called the same tool twice for a result that is already above. Do not "
              "call any tool now: answer the user's request from the results above, in plain words.")


def repeat_error(earlier: RanCall) -> str:
    # No call id in the text: a small model read the id as something to recall and looped on recall instead
    # (the live demo, Qwen2.5-Coder-0.5B). The ledger's rule.repeated_call activity names the earlier call.
    return (f"[repeated-call] not run again: you already called {earlier.name} with these arguments in this turn, "
            "and its result is above, unchanged. Do not call it again or recall it: answer the user from that "
            "result now, or call a different tool (or the same tool with other arguments).")


def repeat_statement(earlier: Iterable[RanCall]) -> str:
    """The system-authored answer when the model repeats a call a second time: the earlier results, quoted."""
    return ("The model asked again for a result it already had instead of answering, so the turn ends here.\n"
            + quoted_results(earlier))


def empty_statement(state: RuleState) -> str:
    """The system-authored answer when the model replies with nothing twice: what the turn's calls found
    (the successful observations), quoted, so the user still sees it; else that there is no answer."""
    found = set(state.evidence)
    good = [c for c in state.ran if c.body in found]
    if not good:
        return "The model replied with neither text nor a tool call twice; the turn ends without an answer."
    return ("The model replied with neither text nor a tool call twice, so the turn ends here.\n"
            + quoted_results(good))


def quoted_results(calls: Iterable[RanCall]) -> str:
    """Each distinct call's result as a quoted block under a line naming the call and its id."""
    return "\n\n".join(f"What {c.name}({json.dumps(json.loads(c.key)[1], ensure_ascii=False)}) returned "
                       f"({c.tool_use_id}):\n{quote(c.body)}" for c in {c.key: c for c in calls}.values())


def note_calls(state: RuleState, calls: Sequence[tuple[str, Mapping[str, Any] | None, str, str]],
               read_only: frozenset[str] = READ_ONLY_TOOLS) -> RuleState:
    """Remembers a step's world calls that ran (``(name, arguments, tool_use_id, body)``, card calls and
    calls not run left out). A world-changing call forgets every earlier one: their results may be stale."""
    if any(name not in read_only for name, _, _, _ in calls):
        return replace(state, ran=()) if state.ran else state
    known = {c.key for c in state.ran}
    new: list[RanCall] = []
    for name, args, tool_use_id, body in calls:
        key = call_key(name, args)
        if args is not None and key not in known:
            known.add(key)
            new.append(RanCall(key, name, tool_use_id, body))
    return replace(state, ran=(*state.ran, *new)) if new else state


# ------------------------------------------------------------------ after the calls


def note_results(state: RuleState, results: Sequence[tuple[bool | None, bool, str]],
                 names: Sequence[str] = ()) -> RuleState:
    """Folds in a step's world-tool results: ``(observes, is_error, body)`` each, ``names`` the tools' names
    in the same order. ``observes`` None (the tool never declared it: a client's or an embedder's tool that
    says nothing) counts as an observation when the call succeeds, as True does; only a tool that declared
    ``observes=False`` never counts."""
    named = list(names) + [""] * (len(results) - len(names))
    ok = [(name, observes, body) for name, (observes, is_error, body) in zip(named, results, strict=True)
          if not is_error]
    if not ok:
        return state
    seen = [(name, observes, body) for name, observes, body in ok if observes is not False]
    state = replace(state, succeeded=(*state.succeeded, *(n for n, _, _ in ok)))
    if not seen:
        return state
    return replace(state, observed=True, evidence=(*state.evidence, *(b for _, _, b in seen)),
                   observers=(*state.observers, *(n for n, _, _ in seen)),
                   undeclared=(*state.undeclared, *(n for n, o, _ in seen if o is None)))


def after_cards(state: RuleState, acked: Sequence[str], only_cards: bool) -> tuple[RuleState, Verdict]:
    """After ``present``: ``acked`` are the presentation ids the step's card calls were acknowledged with
    (errors left out); ``only_cards`` whether the step made no other call."""
    if not acked:
        return state, CONTINUE
    repeat = only_cards and all(pid in state.shown for pid in acked)
    batches = state.repeat_batches + 1 if repeat else 0
    state = replace(state, shown=state.shown | set(acked), last_card=acked[-1], repeat_batches=batches)
    if batches >= REPEAT_BATCHES:
        return state, Verdict("close", "repeated-card", f"presentation {acked[-1]}", "completed")
    return state, CONTINUE


# ------------------------------------------------------------------ a step with no tool call


def after_reply(state: RuleState, text: str, prior: Sequence[PriorTurn]) -> tuple[RuleState, Verdict]:
    """What a step with no tool call means: the answer, a redo (with its nudge) or the turn's close."""
    if not text.strip():
        if state.last_card:
            return state, Verdict("answer", "empty-step", f"presentation {state.last_card}")
        if state.empty_redos == 0:
            return replace(state, empty_redos=1), Verdict("redo", "empty-step", (
                "[empty-step] your reply had neither text nor a tool call. If you planned a tool call, make it "
                "now; otherwise answer the user's request above in your own words."))
        return state, Verdict("close", "empty-step", empty_statement(state), "degraded")
    if RULE_NOTE.match(text):  # the live demo: Qwen answered a new turn with the previous turn's rule note
        if state.echo_redos == 0:
            return replace(state, echo_redos=1), Verdict("redo", "rule-echo", (
                "[rule-echo] that reply copies a note the engine wrote, not an answer. Answer the user's request "
                "above in your own words, or call a tool."))
        return state, Verdict("close", "rule-echo", (
            f"The model copied the engine's own notes instead of serving {state.directive!r}; "
            "the turn ends without an answer."), "degraded")
    if echoes_directive(text, state.directive):  # live: Qwen2.5-Coder-1.5B answered with the request itself
        if state.directive_echo_redos == 0:
            return replace(state, directive_echo_redos=1), Verdict("redo", "directive-echo", DIRECTIVE_ECHO_NUDGE)
        return state, Verdict("close", "directive-echo", echo_statement(state), "degraded")
    repeated = narration_of(text)
    asked = words(state.directive)
    # A re-asked question may rightly get the same words back: only a repeat of a turn on another subject
    # (no content word shared with its directive) is drift. A short reply ("OK.", "Done.": SHORT_REPLY_WORDS
    # words or fewer) is never drift: it is how a model acknowledges unrelated requests alike.
    same = prior.narrated(repeated) if isinstance(prior, PriorTurns) else [p for p in prior if p.narration == repeated]
    if repeated and len(_WORD.findall(repeated)) > SHORT_REPLY_WORDS and any(
            not asked & words(p.directive) for p in same):
        events = state.drift_events + 1
        state = replace(state, drift_events=events)
        if events >= DRIFT_EVENTS:
            return state, Verdict("close", "steering-drift", (
                f"The model repeated an earlier turn's answer {events} times instead of serving {state.directive!r}; "
                "the turn ends without an answer."), "degraded", lower_horizon=True)
        return state, Verdict("redo", "steering-drift", (
            "[steering-drift] that reply repeats an earlier turn's answer word for word. Answer the user's "
            "current request above, in this turn's terms."), lower_horizon=True)
    state = replace(state, drift_events=0)
    if state.live and not state.observed and not accepts_no_live_data(text):
        if state.freshness_strikes == 0:
            return replace(state, freshness_strikes=1), Verdict("redo", "freshness-check", freshness_nudge(state))
        figures = [p.figure for p in prior if p.figure is not None]
        return (replace(state, freshness_strikes=state.freshness_strikes + 1),
                Verdict("close", "freshness-check", freshness_statement(state, figures), "degraded"))
    return state, Verdict("answer", text=text)


DIRECTIVE_ECHO_NUDGE = ("[directive-echo] that reply only repeats the user's request; it is not an answer. Give "
                        "the answer itself in your own words, or call a tool if you need one first.")


def echo_statement(state: RuleState) -> str:
    """The system-authored answer when the model twice answers with the request itself: what the turn's
    calls found, quoted, else that there is no answer (the directive is not quoted back once more)."""
    found = set(state.evidence)
    good = [c for c in state.ran if c.body in found]
    head = "The model repeated the user's request instead of answering it twice"
    if not good:
        return head + "; the turn ends without an answer."
    return head + ", so the turn ends here.\n" + quoted_results(good)


# Quotes a reply may wrap the echo in; removed everywhere before comparing.
_ECHO_QUOTES = str.maketrans("", "", "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e\u300c\u300d")
_ECHO_EDGES = " \t\n.!?:;,\u2026"
# Words a reply may put around the copied request and still be only the copy ("answer: ...", "You asked: ...",
# "otherwise answer: '...'", the words of the old nudge that was copied with it).
_ECHO_LABELS = frozenset(
    "answer answers otherwise reply response request directive task question query user users the your you "
    "asked said wrote is was here final output result".split())
ECHO_LABEL_WORDS = 6  # at most this many label words beside the copy: a short wrapper, not a reply


def _echo_form(text: str) -> str:
    """``text`` as the echo check compares it: no quotes, lowercased, whitespace collapsed, no edge punctuation."""
    return " ".join(text.translate(_ECHO_QUOTES).lower().split()).strip(_ECHO_EDGES)


def echoes_directive(text: str, directive: str) -> bool:
    """Whether ``text`` only repeats ``directive``: equal once quotes, case, whitespace and edge punctuation are
    set aside, or the directive (once or more) inside a short wrapper of label words (``"..."``, ``answer: ...``).
    A directive of fewer than two words never counts: "Hello" answered "Hello!" is a greeting, not an echo."""
    asked = _echo_form(directive)
    if len(asked.split()) < 2:
        return False
    reply = _echo_form(text)
    if reply == asked:
        return True
    if asked not in reply:
        return False
    rest = _WORD.findall(reply.replace(asked, " "))
    return len(rest) <= ECHO_LABEL_WORDS and all(w in _ECHO_LABELS for w in rest)


def stepped(state: RuleState) -> RuleState:
    """A step that made tool calls breaks a run of drift events."""
    return replace(state, drift_events=0) if state.drift_events else state


# ------------------------------------------------------------------ thread drift


# A paused directive in the tail shows at most this many characters (cut at a word, marked with …): the
# tail is re-sent with every request and recorded with its turn, so an unbounded entry (a pasted task)
# would cost every later request its whole length; the turn itself stays in the ledger for recall.
PAUSED_CHARS = 120


# A directive that carries the work on ("Continue with the plan.", "go ahead", "next") changes no subject:
# nothing is paused by it, though it shares no word with what it continues.
_CARRY_ON = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|yes|yep|sure|good|great|thanks|fine|alright)\W+)*(?:please\s+)?(?:continue|carry on|"
    r"keep going|go on|go ahead|proceed|resume|next|do it|sounds good|lgtm)\b[^?]{0,40}$", re.IGNORECASE)


def paused_directives(directive: str, prior: Sequence[PriorTurn], limit: int = 3) -> tuple[str, ...]:
    """When ``directive`` changes subject (shares no content word with the previous directive), the
    previous subject's directives (newest last, at most ``limit``, each at most ``PAUSED_CHARS``) are listed
    as "earlier, now paused". A directive that carries on (``Continue with the plan.``) pauses nothing."""
    if not prior or _CARRY_ON.match(directive.strip()):
        return ()
    current = words(directive)
    last = words(prior[-1].directive)
    if not current or not last or current & last:
        return ()
    subject: list[str] = []
    for p in reversed(prior):
        if current & words(p.directive) or len(subject) >= limit:
            break
        subject.append(_bounded(p.directive, PAUSED_CHARS))
    return tuple(reversed(subject))


def _bounded(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word and marked with … when longer."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return (text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]) + "…"


# ------------------------------------------------------------------ words

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "the a an and or of to in on at for from by with about as is are was were be been it its this that these those "
    "what whats which who how when where why do does did can could would should will shall may might me my you your "
    "we our they their he she his her them us i give show tell get find please now current currently today latest "
    "right live value".split()
)


def words(text: str) -> frozenset[str]:
    """Content words of ``text``, lowercased; numbers and one-letter tokens left out. A short text's are
    kept: every step compares the turn against each earlier turn's directive, the same texts each step."""
    return _short_words(text) if len(text) <= _KEPT_CHARS else _words(text)


_KEPT_CHARS = 2_000  # a directive's length, not a tool result's (kept texts are the cache's keys)


@lru_cache(maxsize=8192)
def _short_words(text: str) -> frozenset[str]:
    return _words(text)


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in (m.lower() for m in _WORD.findall(text))
                     if len(w) > 1 and not w.isdigit() and w not in _STOP)


def _serialize(args: Mapping[str, Any]) -> str:
    """A card payload's values as text (keys are the schema's, shared by every card: left out)."""
    def values(v: Any) -> list[str]:
        if isinstance(v, Mapping):
            return [s for x in v.values() for s in values(x)]
        if isinstance(v, list | tuple):
            return [s for x in v for s in values(x)]
        return [v if isinstance(v, str) else json.dumps(v)]
    return " ".join(values(args))
