"""Plan one session under several capacity profiles and print the plans side by side.

``compare_plans(store_or_entries, session, profiles)`` is what the main job prints: for each turn, its
fidelity (Full, card, packet, behind a reset) and what it costs under each profile, then each plan's
budget arithmetic and packet. Nothing is written: a packet whose summary does not exist yet is shown
as "to write", with the room the plan reserved for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.planner.plan import Plan, PlannedTurn
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, text_tokens
from vak_context.context.request.messages import ToolSpec
from vak_context.errors import InvalidInput
from vak_context.events.envelope import StoredEntry
from vak_context.events.payloads import Activity
from vak_context.storage.ledger import LedgerStore

LABELS = {Fidelity.FULL: "full", Fidelity.CARD: "card", Fidelity.PACKET: "packet", Fidelity.BEHIND_RESET: "reset",
          Fidelity.CURRENT: "current"}


def session_view(store_or_entries: LedgerStore | Iterable[StoredEntry], session: str) -> SessionView:
    if isinstance(store_or_entries, LedgerStore):
        head = store_or_entries.head(session)
        if head is None:
            raise InvalidInput(f"session {session!r} is empty in the ledger at {store_or_entries.root}")
        return SessionView.build(store_or_entries.chain_to_root(head))
    return SessionView.build(e for e in store_or_entries if e.session == session)


def recorded_system_prompt(view: SessionView) -> str:
    """The system prompt an imported session carried (``import.system_prompt``), or ''."""
    for payload in view.preamble.values():
        if isinstance(payload, Activity) and payload.activity == "import.system_prompt":
            return str(payload.detail.get("text", ""))
    return ""


def compare_plans(
    store_or_entries: LedgerStore | Iterable[StoredEntry],
    session: str,
    profiles: Mapping[str, CapacityProfile],
    *,
    directive: str | None = None,
    system: str | None = None,
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    width: int = 44,
) -> str:
    """Plan ``session`` under each profile and lay the plans out side by side.

    ``directive`` None replays the session as of its last turn (that turn is the current one);
    otherwise the directive is a new turn after it. ``system`` None uses the session's recorded
    system prompt. Prefix and tail sizes are measured per profile (its tokens per character).
    """
    if not profiles:
        raise InvalidInput("give at least one profile to plan under, e.g. {'local': profile}")
    view = session_view(store_or_entries, session)
    turns = view.index.turns
    if not turns:
        raise InvalidInput(f"session {session!r} has no turns to plan")
    prompt = recorded_system_prompt(view) if system is None else system
    current = None
    if directive is None:
        if turns[-1].behind_reset:
            directive = "(the next turn)"
        else:
            current, directive = turns[-1].ordinal, ""
    plans: dict[str, Plan] = {}
    for name, prof in profiles.items():
        plans[name] = view.plan(
            prof, directive, prefix_tokens=prefix_tokens(prof, prompt, tools), tail_tokens=text_tokens(prof, tail),
            current=current,
        )
    return _render(view, session, plans, profiles, current, directive, width)


def _cell(t: PlannedTurn | None) -> str:
    if t is None:
        return "-"
    label = LABELS[t.fidelity]
    if t.fidelity in (Fidelity.FULL, Fidelity.CARD, Fidelity.CURRENT):
        label += f" {t.tokens:>6,}"
        if t.retrieved:
            label += " (retrieved)"
    return label


def _footer(p: Plan) -> list[str]:
    b, pk = p.budget, p.packet
    packet = "none"
    if pk is not None:
        state = "to write" if pk.needs_summary else "stored" if pk.stored_id else "deterministic"
        packet = f"turns {pk.first_ordinal}–{pk.last_ordinal}, {pk.level} ({state}), {pk.tokens:,}"
    return [
        f"{b.horizon:,} − {b.prefix:,} − {b.tail:,} − {b.output_reserve:,} − {b.current_turn_reserve:,} = {b.budget:,}",
        f"{b.history:,} (full {b.full:,}, cards {b.cards:,}, packet {b.packet:,})",
        packet,
        f"{len(p.with_fidelity(Fidelity.FULL))} full, {len(p.with_fidelity(Fidelity.CARD))} cards, "
        f"{len(p.with_fidelity(Fidelity.PACKET))} packet, {len(p.with_fidelity(Fidelity.BEHIND_RESET))} reset",
        "RESCUE: " + p.rescue_reason if p.rescue else f"digest {p.digest[:16]}",
    ]


FOOTER = ["budget", "history", "packet", "turns", "plan"]


def _render(
    view: SessionView,
    session: str,
    plans: Mapping[str, Plan],
    profiles: Mapping[str, CapacityProfile],
    current: int | None,
    directive: str,
    width: int,
) -> str:
    names = list(plans)
    by = {n: {t.ordinal: t for t in p.turns} for n, p in plans.items()}
    shown = [t for t in view.index.turns if current is None or t.ordinal <= current]
    columns = {
        n: [f"{n} ({profiles[n].key})", *(_cell(by[n].get(t.ordinal)) for t in shown), *_footer(plans[n])]
        for n in names
    }
    col = {n: max(len(c) for c in cells) for n, cells in columns.items()}
    what = f"turn {current} as the current turn" if current is not None else f"a new turn: {directive!r}"
    lines = [f"plans for session {session!r} ({len(view.index.turns)} turns), {what}", ""]

    def row(left: str, i: int) -> str:
        return left + "".join(f" | {columns[n][i]:<{col[n]}}" for n in names).rstrip()

    lines.append(row(f"{'turn':>4}  {'directive':<{width}}", 0))
    rule = "-" * max(len(lines[-1]), width + 6)
    lines.append(rule)
    for i, turn in enumerate(shown, 1):
        text = " ".join(turn.directive.text.split())
        text = text if len(text) <= width else text[: width - 1] + "…"
        lines.append(row(f"{turn.ordinal:>4}  {text:<{width}}", i))
    lines.append(rule)
    for k, label in enumerate(FOOTER):
        lines.append(row(f"{label:>{width + 6}}", len(shown) + 1 + k))
    return "\n".join(lines)
