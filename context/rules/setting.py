"""Rules as a session setting (docs/DRIFT.md "Rules as a setting"). Pure.

Each turn rule (:mod:`vak_context.context.rules.drift`) runs in one of three modes:

* ``enforce``: the rule acts (a nudge and one more model call, an intercepted call, a turn closed with
  the engine's statement), as the engine's own loop has always done;
* ``observe``: the rule judges as under ``enforce``, but each verdict it would have acted on is only
  recorded in the ledger (a ``rule.observed`` activity naming the rule and what it would have done):
  nothing the model or the client sees changes;
* ``off``: the rule does nothing and records nothing.

A setting is one mode for every rule with optional per-rule overrides, written ``"observe"``,
``"observe,freshness-check=enforce"`` or ``"freshness-check=off"`` (overrides over the driver's default),
or as a mapping ``{"freshness-check": "off"}`` in the API. The default depends on who is the agent: the
engine's own loop with its own tools (``Session.run``, ``vak run``/``chat``/``turn``) enforces; where the
engine is not the agent (``vak serve``, the adapters, the caller's loop ``Session.begin``) it observes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from vak_context.errors import InvalidRules

Mode = Literal["enforce", "observe", "off"]
MODES: tuple[Mode, ...] = ("enforce", "observe", "off")
# The rules a setting names: the tags of drift.py's verdicts. Not rules (engine mechanics, always on): the
# cap on calls per step, one run per distinct call in a step, a card taken as the answer of an empty step
# after it, the paused-directives line of the tail (what the projection shows, not a verdict).
RULES = ("freshness-check", "topic-mismatch", "repeated-call", "repeated-card", "empty-step", "rule-echo",
         "directive-echo", "steering-drift", "contradiction")
ENGINE_LOOP: Mode = "enforce"  # the engine is the agent: Session.run, vak run / chat / turn
CALLERS: Mode = "observe"  # the engine is not the agent: Session.begin, vak serve, the adapters


@dataclass(frozen=True)
class RuleSetting:
    """The mode of every rule: ``default``, except the rules ``overrides`` names."""

    default: Mode
    overrides: tuple[tuple[str, Mode], ...] = ()

    def mode(self, rule: str) -> Mode:
        return next((m for r, m in self.overrides if r == rule), self.default)

    def __str__(self) -> str:
        return ",".join([self.default, *(f"{r}={m}" for r, m in self.overrides)])


def invalid(got: str) -> InvalidRules:
    """The error for a setting that is not one (``got`` as the message names it), listing what is allowed."""
    return InvalidRules(got, MODES, RULES)


def rule_setting(value: str | Mapping[str, str] | RuleSetting | None, default: Mode) -> RuleSetting:
    """``value`` as a setting; None (or only overrides) takes ``default`` as the mode of the other rules.
    :class:`~vak_context.errors.InvalidRules` names what is allowed for anything else."""
    if value is None:
        return RuleSetting(default)
    if isinstance(value, RuleSetting):
        return value
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        items = []
        for part in (p.strip() for p in value.split(",")):
            rule, eq, mode = part.partition("=")
            items.append((rule.strip(), mode.strip()) if eq else ("", rule.strip()))
    else:
        raise invalid(repr(value))
    base, overrides = default, dict[str, Mode]()
    for i, (rule, mode) in enumerate(items):
        if mode not in MODES:
            raise invalid(repr(value))
        if not rule:
            if i != 0:  # a bare mode only leads: "observe,freshness-check=enforce"
                raise invalid(repr(value))
            base = cast(Mode, mode)
        elif rule not in RULES:
            raise invalid(repr(value))
        else:
            overrides[rule] = cast(Mode, mode)
    return RuleSetting(base, tuple((r, m) for r, m in overrides.items() if m != base))
