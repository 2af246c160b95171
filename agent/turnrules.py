"""The turn rules on the live loop: :mod:`vak_context.context.rules.drift`'s pure checks, with their ledger facts.

:class:`TurnRules` holds one turn's :class:`~vak_context.context.rules.drift.RuleState` and the session's earlier turns
(what the drift and freshness checks compare against), and writes every check that fires as a ledger
entry, so a replay shows why a turn ended as it did:

* a redo is a ``Nudge`` (its tag: ``empty-step``, ``freshness-check``, ``steering-drift``, ``rule-echo``,
  ``directive-echo``, ``repeated-call``), which the
  projection renders verbatim as a user message after the step it answers;
* an intercepted card call gets an error ``tool_result`` (the text the model repairs from) and a
  ``rule.intercept`` activity;
* a read-only call repeated from an earlier step of the turn gets an error ``tool_result`` naming the
  earlier call and a ``rule.repeated_call`` activity (it is not run);
* a repeated-card batch is a ``rule.repeated_cards`` activity; a card taken as the answer of an empty
  step is ``rule.card_is_answer``; a closing rule is ``rule.close`` with the system-authored statement
  and the outcome the TurnCard then carries.

Each rule runs in the mode its :class:`~vak_context.context.rules.setting.RuleSetting` gives it
(:attr:`TurnRules.setting`, set per turn by the driver): ``enforce`` as above; ``observe``: nothing the
model sees changes (no nudge, no intercept, no unrun call, no close, no lowered horizon) and each verdict
the rule would have acted on is a ``rule.observed`` activity (``rule``, ``would``: redo / intercept / skip /
close, ``text``: the nudge, error or statement it would have written); ``off``: nothing at all. A turn whose
directive seeks a live value records the freshness rule's verdict on its answer as a ``rule.freshness``
activity (which tools counted as observations, and which of those declared nothing), unless the rule is off.
A directive or a reply that contradicts a stated rule or hard constraint in force
(:mod:`vak_context.context.stated.conflict`) is a ``rule.contradiction`` activity under ``enforce`` (a
``rule.observed`` one under ``observe``): recorded, never acted on (docs/DRIFT.md "Stated rules").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from vak_context.context.history.turncard import narration_of
from vak_context.context.rules import drift
from vak_context.context.rules.drift import PriorTurn, PriorTurns, Verdict
from vak_context.context.rules.freshness import RecordedFigure, accepts_no_live_data, figure_of
from vak_context.context.rules.setting import ENGINE_LOOP, RuleSetting
from vak_context.context.stated.conflict import contradictions
from vak_context.context.stated.items import StatedItem
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import Activity, Directive, Nudge, Presentation, TurnCard


class RuleServices(Protocol):
    async def append(self, payloads: Sequence[Any]) -> list[str]: ...

    async def store_result(self, tool_use_id: str, tool_name: str, body: str, is_error: bool) -> dict[str, Any]: ...


ENFORCED = RuleSetting(ENGINE_LOOP)  # the engine's own loop, until a driver sets the turn's setting


class TurnRules:
    """The rules of one session's turns; ``history`` is the session's earlier turns, oldest first."""

    def __init__(self, services: RuleServices, history: Sequence[PriorTurn] = (),
                 read_only: frozenset[str] = drift.READ_ONLY_TOOLS, repeat_rule: str = "close",
                 setting: RuleSetting = ENFORCED) -> None:
        self.services = services
        self.setting = setting  # each rule's mode; the driver sets it per turn (it may change between steps)
        self.read_only = read_only  # the tools that declared themselves read-only (the repeated-call rule)
        self.repeat_rule = repeat_rule  # "close" or "redo": what the repeated call's second strike does
        self.history = history  # the property keeps it a PriorTurns
        self.state = drift.start("")
        self.cards: list[dict[str, Any]] = []  # payloads of the cards acknowledged this turn
        self.stated: tuple[StatedItem, ...] = ()  # the stated items in force this turn (the driver sets them)

    @property
    def history(self) -> PriorTurns:
        """The session's earlier turns, oldest first (``drift.PriorTurns``: their narrations indexed)."""
        return self._history

    @history.setter
    def history(self, turns: Sequence[PriorTurn]) -> None:
        self._history = turns if isinstance(turns, PriorTurns) else PriorTurns(turns)

    def begin(self, directive: str) -> tuple[str, ...]:
        """A new turn: fresh state; the earlier directives a change of subject leaves paused."""
        self.state, self.cards = drift.start(directive), []
        return drift.paused_directives(directive, self.history)

    async def gate(self, step_id: str, cards: Sequence[tuple[int, str, str, Mapping[str, Any]]]) -> tuple[set[int], Verdict]:
        """Card calls ``(position, tool_use_id, name, arguments)`` before they run: the positions
        intercepted (each already answered with its error result) and the verdict."""
        # The earlier turns' figures only when a card is called (most steps call none; the history is long).
        figures = [p.figure for p in self.history if p.figure is not None] if cards else []
        self.state, errors, verdict = drift.gate_cards(self.state, [(i, a) for i, _, _, a in cards], figures)
        if errors:
            tag = errors[min(errors)].split("]", 1)[0].lstrip("[")
            if await self._held(tag, "close" if verdict.action == "close" else "intercept",
                                verdict.text if verdict.action == "close" else errors[min(errors)],
                                step_id=step_id, calls=[t for i, t, _, _ in cards if i in errors]):
                return set(), drift.CONTINUE
        for i, tool_use_id, name, _args in cards:
            if i in errors:
                await self.services.store_result(tool_use_id, name, errors[i], True)
        if errors:
            tag = errors[min(errors)].split("]", 1)[0].lstrip("[")
            await self.services.append([Activity(activity="rule.intercept", detail={
                "rule": tag, "step_id": step_id, "calls": [t for i, t, _, _ in cards if i in errors]})])
        await self._closing(verdict)
        return set(errors), verdict

    async def gate_repeats(self, step_id: str, calls: Sequence[tuple[int, str, str, Mapping[str, Any] | None]]
                           ) -> tuple[set[int], Verdict]:
        """World calls ``(position, tool_use_id, name, arguments)`` before they run: the positions that
        repeat an earlier call of the turn (each already answered with its error result) and the verdict."""
        self.state, errors, verdict = drift.gate_repeats(self.state, [(i, n, a) for i, _, n, a in calls],
                                                       self.read_only, redo=self.repeat_rule == "redo")
        if errors:
            would = verdict.action if verdict.action in ("redo", "close") else "skip"
            if await self._held("repeated-call", would, verdict.text or errors[min(errors)], step_id=step_id,
                                calls=[t for i, t, _, _ in calls if i in errors]):
                return set(), drift.CONTINUE
        for i, tool_use_id, name, _args in calls:
            if i in errors:
                await self.services.store_result(tool_use_id, name, errors[i], True)
        if errors:
            earlier = {c.key: c.tool_use_id for c in self.state.ran}
            await self.services.append([Activity(activity="rule.repeated_call", detail={
                "step_id": step_id, "strike": self.state.repeat_strikes,
                "calls": [{"tool_use_id": t, "name": n, "earlier": earlier[drift.call_key(n, a)]}
                          for i, t, n, a in calls if i in errors]})])
        await self._closing(verdict)
        return set(errors), verdict

    def ran(self, calls: Sequence[tuple[str, Mapping[str, Any] | None, str, str]]) -> None:
        """The world calls that ran this step ``(name, arguments, tool_use_id, body)``, for the repeat rule."""
        self.state = drift.note_calls(self.state, calls, self.read_only)

    async def after_calls(self, results: Sequence[tuple[bool | None, bool, str]],
                          acked: Sequence[tuple[str, Mapping[str, Any]]], only_cards: bool,
                          names: Sequence[str] = ()) -> Verdict:
        """After a step's calls ran: world results ``(observes, is_error, body)`` (``names``: their tools, in
        order) and the cards acknowledged ``(presentation id, payload)``."""
        self.state = drift.note_results(drift.stepped(self.state), results, names)
        for pid, payload in acked:
            if pid not in self.state.shown:
                self.cards.append(dict(payload))
        self.state, verdict = drift.after_cards(self.state, [pid for pid, _ in acked], only_cards)
        if self.state.repeat_batches and self.setting.mode("repeated-card") != "off":
            await self.services.append([Activity(activity="rule.repeated_cards", detail={
                "presentation": self.state.last_card, "consecutive": self.state.repeat_batches})])
        if verdict.action == "close" and await self._held(verdict.tag, "close", verdict.text):
            return drift.CONTINUE
        await self._closing(verdict)
        return verdict

    async def redo(self, verdict: Verdict) -> None:
        """A redo verdict given before the step's calls ran (the repeated-call rule's): its nudge, written
        after the step's results so the projection shows it after them."""
        await self.services.append([Nudge(tag=verdict.tag, text=verdict.text)])

    async def on_reply(self, text: str) -> Verdict:
        """A step with no tool call: the answer, a redo (its nudge written) or the close."""
        self.state, verdict = drift.after_reply(self.state, text, self.history)
        if self.state.live and verdict.tag in ("freshness-check", ""):
            await self._freshness(verdict, text)
        if verdict.action in ("redo", "close") and await self._held(verdict.tag, verdict.action, verdict.text):
            verdict = Verdict("answer", text=text)  # the model's reply stands, as if the rule never fired
        if verdict.action == "redo":
            await self.services.append([Nudge(tag=verdict.tag, text=verdict.text)])
        elif verdict.action == "answer" and verdict.tag:
            await self.services.append([Activity(activity="rule.card_is_answer", detail={
                "rule": verdict.tag, "presentation": self.state.last_card})])
        await self._closing(verdict)
        return verdict

    async def judge_stated(self, where: str, text: str, **detail: Any) -> None:
        """Whether ``text`` (``where``: the directive or a reply) contradicts a stated rule or hard constraint
        in force: each contradiction is recorded, nothing else is done (docs/DRIFT.md "Stated rules")."""
        mode = self.setting.mode("contradiction")
        if mode == "off" or not self.stated:
            return
        for item, sentence in contradictions(self.stated, text):
            found = {"where": where, "item": item.id, "category": item.category, "stated": item.text,
                     "turn": item.turn, "sentence": sentence, **detail}
            if mode == "enforce":
                await self.services.append([Activity(activity="rule.contradiction", detail=found)])
            else:
                await self.services.append([Activity(activity="rule.observed", detail={
                    "rule": "contradiction", "would": "record", "text": sentence, **found})])

    def finish(self, directive: str, prose: str, at: float) -> None:
        """Remember the closed turn for the next ones' checks: ``prose`` is the model's own final answer
        ("" when the turn ended on a card or a system-authored statement, which records no new figure)."""
        figure = figure_of(prose, self.cards)
        recorded = RecordedFigure(figure, len(self.history) + 1, at) if figure else None
        self.history.append(PriorTurn(directive, narration_of(prose) if prose.strip() else "", recorded))

    async def _held(self, rule: str, would: str, text: str, **detail: Any) -> bool:
        """Whether ``rule``'s verdict is held back (its mode is not ``enforce``); under ``observe`` it is
        recorded: what the rule would have done (``would``) and the text it would have written."""
        mode = self.setting.mode(rule)
        if mode == "enforce":
            return False
        if mode == "observe":
            await self.services.append([Activity(activity="rule.observed", detail={
                "rule": rule, "would": would, "text": text, **detail})])
        return True

    async def _freshness(self, verdict: Verdict, text: str) -> None:
        """The freshness rule's verdict on a live directive's answer step, as an activity (not under off)."""
        mode = self.setting.mode("freshness-check")
        if mode == "off":
            return
        state = self.state
        if verdict.tag == "freshness-check":
            found = "nothing observed"
        else:
            found = "observed" if state.observed else "no live data stated" if accepts_no_live_data(text) else "answered"
        await self.services.append([Activity(activity="rule.freshness", detail={
            "verdict": found, "acted": verdict.tag == "freshness-check" and mode == "enforce", "mode": mode,
            "observed_by": list(dict.fromkeys(state.observers)),
            "undeclared": list(dict.fromkeys(state.undeclared)),
            "succeeded": list(dict.fromkeys(state.succeeded))})])

    async def _closing(self, verdict: Verdict) -> None:
        if verdict.action == "close":
            await self.services.append([Activity(activity="rule.close", detail={
                "rule": verdict.tag, "outcome": verdict.outcome, "statement": verdict.text})])


PRIOR_KINDS = ("directive", "presentation", "turn_card")  # the entries ``prior_turns_of`` reads


def prior_turns_of(entries: Iterable[StoredEntry]) -> list[PriorTurn]:
    """The earlier turns of a session as the rules see them, read back from its ledger entries (in chain
    order): each closed turn's directive, its TurnCard narration and the figure it recorded, at the card's
    time. A turn that did not complete (a system-authored or missing answer) records no narration or figure."""
    mapper, out = Mapper(), []  # type: Mapper, list[PriorTurn]
    directive, cards, ordinal = "", [], 0  # type: str, list[dict[str, Any]], int
    for entry in entries:
        if entry.kind not in PRIOR_KINDS:
            continue
        payload = mapper.payload_of(entry)
        if isinstance(payload, Directive):
            directive, cards, ordinal = payload.text, [], ordinal + 1
        elif isinstance(payload, Presentation):
            cards.append(dict(payload.payload))
        elif isinstance(payload, TurnCard):
            done = payload.outcome == "completed"
            narration = payload.answered.narration if done else ""
            figure = figure_of(narration, cards) if done else ""
            at = entry.time_us / 1e6
            out.append(PriorTurn(directive, narration, RecordedFigure(figure, ordinal, at) if figure else None))
    return out


def ack_id(result: Mapping[str, Any]) -> str | None:
    """The presentation id a card call's result acknowledges; None for an error."""
    if result.get("is_error"):
        return None
    try:
        pid = json.loads(str(result.get("content", ""))).get("presentation")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, str) else None
