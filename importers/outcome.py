"""What an import wrote and left out: one ``SessionOutcome`` per session, and the file's ``ImportOutcome``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SessionOutcome:
    session: str
    format: str
    entries: int = 0
    turns: int = 0
    steps: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    error_results: int = 0
    windowed_results: int = 0
    controls: int = 0
    compactions: int = 0
    receipts: int = 0
    cards: int = 0
    unanswered_calls: int = 0
    renamed_calls: int = 0  # calls whose recorded id repeated an earlier call's, given a unique one
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass
class ImportOutcome:
    path: str
    format: str
    sessions: list[SessionOutcome] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # records of the file no session took

    def totals(self) -> dict[str, int]:
        keys = (
            "entries",
            "turns",
            "steps",
            "tool_calls",
            "tool_results",
            "error_results",
            "windowed_results",
            "controls",
            "compactions",
            "receipts",
            "cards",
            "unanswered_calls",
            "renamed_calls",
        )
        return {k: sum(getattr(s, k) for s in self.sessions) for k in keys}

    def summary(self) -> str:
        t = self.totals()
        skipped = self.skipped + sum((s.skipped for s in self.sessions), Counter())
        lines = [
            f"imported {self.path} ({self.format}): {len(self.sessions)} session(s), {t['entries']} entries, "
            f"{t['turns']} turns, {t['steps']} steps, {t['tool_calls']} tool calls, {t['tool_results']} results "
            f"({t['error_results']} errors, {t['windowed_results']} windowed), {t['receipts']} receipts, "
            f"{t['compactions']} compactions, {t['controls']} control messages, {t['cards']} turn cards"
        ]
        if t["unanswered_calls"]:
            lines.append(f"  {t['unanswered_calls']} tool call(s) have no recorded result")
        if t["renamed_calls"]:
            lines.append(
                f"  {t['renamed_calls']} tool call(s) reused an earlier call's id and got a unique one (<id>~n)"
            )
        for reason, n in sorted(skipped.items()):
            lines.append(f"  skipped {n}: {reason}")
        return "\n".join(lines)
