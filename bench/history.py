"""History size on real sessions (issue 26, spec §10 "Typical shape for a 31-turn session on a small model").

Every recorded session of at least ``--min-turns`` closed turns in ``../shared/data/trajectories`` (imported
through ``vak_context.importers``, as ``vak import`` does) and a few generated sessions
(``vak_context.sessions.generator``) are planned once, for one follow-up directive, under a local 8k
profile (the bundled model's window, output reserve 512, the session's system prompt as the prefix).
Per session it prints the turns, the plan's history tokens (and how many turns are Full, cards, in a
packet), the median and largest card, and how many turns have a card larger than their full record.

A card's size is what the planner charges for it: ``render_card`` of the stored TurnCard, counted as a
request counts it (``vak_context.context.planner.sizes``). "Larger than its record" compares that with the
full record's tokens at the same rate; such a turn is carried Full (``fill._KEPT_CODE``), never as the
larger card.

The last line is for scripts, and has exactly this form, over the recorded sessions (the issue's
goals are theirs; the line before it gives the generated sessions' figures the same way):
``median card N tokens; 31-turn sessions over 3,000 tokens: M of K; cards larger than their record: C``
("31-turn": 30 closed turns and the follow-up). "least" is the history with every planned turn (not one
behind a reset) at its cheaper form and none promoted; the planner then spends what the budget has left
on Full turns, by value. A card over ``turncard.CARD_CHARS`` shows its narration, asked text and
arguments bounded (``turncard.CARD_LEVELS``): the generated sessions' cards were ~150 tokens with the
quoting answer whole, and are now ~96.

Run: ``.venv/bin/python bench/history.py`` (about 40 s; ``--generated 0`` skips the generated sessions,
``--files 'tau-bench*'`` reads only the files that match).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.sizes import card_text
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens
from vak_context.events.payloads import Activity
from vak_context.importers import import_path
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

SHARED = Path(os.environ.get("VAK_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))
TRAJECTORIES = SHARED / "data" / "trajectories"
LOCAL_N_CTX = 8_192  # the bundled local model's window (tests/fakes/local_model.LOCAL_MODEL_N_CTX)
TOKENS_PER_CHAR = 0.25  # the importers' rate in the tests (tests/fakes/imported.TOKENS_PER_CHAR)
FOLLOW_UP = "Can you go over what we settled so far, and confirm the last figure again?"
HISTORY_GOAL = 3_000
CARD_GOAL = 100
SHAPE_TURNS = 31


def local_profile(n_ctx: int = LOCAL_N_CTX) -> CapacityProfile:
    """The local model's 8k window, as tests/unit/test_replay_typical_shape.py plans it."""
    return CapacityProfile(
        key=ProfileKey("local", "smollm2"), declared_window=n_ctx, instruction_horizon=Horizon(n_ctx, 0.9, 0.0),
        tokens_per_char=Ewma(TOKENS_PER_CHAR, 5), output_reserve=512,
    )


@dataclass(frozen=True)
class Figures:
    """One session's plan: its turns (the follow-up included), history tokens and cards."""

    name: str
    recorded: bool  # a recorded session (the goals), not a generated one
    turns: int
    history: int
    full: int
    cards: int
    packeted: int
    card_tokens: tuple[int, ...]  # every closed turn's card, as the planner charges it
    full_tokens: tuple[int, ...]  # the same turns' full records
    rendered: tuple[int, ...]  # the same turns' cards as rendered, before the record bounds them
    coverage: int  # every planned turn at its cheaper form (card or record), none promoted: the least history

    @property
    def larger(self) -> int:
        return sum(c > f for c, f in zip(self.card_tokens, self.full_tokens, strict=True))

    @property
    def fallbacks(self) -> int:
        """Turns whose rendered card is longer than their record: the record is their card."""
        return sum(c > f for c, f in zip(self.rendered, self.full_tokens, strict=True))


def system_prompt(store: LedgerStore, session: str) -> str:
    """The recorded system prompt (an ``import.system_prompt`` activity near the start), or none."""
    for seq, eid, _parent, kind, _t in store.iter_metadata(session):
        payload = store.payload(eid) if kind == "activity" else None
        if isinstance(payload, Activity) and payload.activity == "import.system_prompt":
            return str(payload.detail["text"])
        if seq > 8:
            break
    return ""


def measure(store: LedgerStore, session: str, name: str, profile: CapacityProfile, recorded: bool = True) -> Figures:
    head = store.head(session)
    view = SessionView.build(store.chain_to_root(head or ""), TOKENS_PER_CHAR)
    p = view.plan(profile, FOLLOW_UP, prefix_tokens=prefix_tokens(profile, system_prompt(store, session)),
                  tail_tokens=20)
    count = {f: sum(t.fidelity == f for t in p.turns) for f in Fidelity}
    tpc = profile.tokens_per_char.value
    rendered = tuple(estimate_tokens(len(card_text(view.index, view.index.turn(t.ordinal), view.infos)), tpc)
                     for t in p.turns)
    return Figures(name, recorded, len(p.turns) + 1, p.budget.history, count[Fidelity.FULL], count[Fidelity.CARD],
                   count[Fidelity.PACKET],  # a turn behind a reset is in none of the three
                   tuple(t.card_tokens for t in p.turns), tuple(t.full_tokens for t in p.turns), rendered,
                   sum(min(t.card_tokens, t.full_tokens) for t in p.turns if t.fidelity != Fidelity.BEHIND_RESET))


def recorded(store: LedgerStore, folder: Path, min_turns: int, files: str = "*") -> Iterable[tuple[str, str, bool]]:
    """(session, name, True) of every recorded session with at least ``min_turns`` closed turns in the
    files of ``folder`` that match ``files``."""
    for path in sorted(p for p in folder.glob(files) if p.name != "README.md"):
        outcome = import_path(store, path, tokens_per_char=TOKENS_PER_CHAR)
        for s in outcome.sessions:
            if s.turns >= min_turns:
                yield s.session, s.session, True


def generated(store: LedgerStore, seeds: int, turns: int) -> Iterable[tuple[str, str, bool]]:
    for seed in range(seeds):
        session = f"generated-{seed}"
        generate_session(seed=seed, turns=turns, append=lambda p, b, s=session: store.append_one(s, p, blob=b))
        yield session, f"{session} (generator)", False


def _median(values: Sequence[int]) -> int:
    return round(statistics.median(values)) if values else 0


def summary(figures: Sequence[Figures]) -> str:
    """The one line a script reads."""
    median = _median([c for f in figures for c in f.card_tokens])
    shaped = [f for f in figures if f.turns == SHAPE_TURNS]
    over = sum(f.history >= HISTORY_GOAL for f in shaped)
    larger = sum(f.larger for f in figures)
    return (f"median card {median} tokens; 31-turn sessions over 3,000 tokens: {over} of {len(shaped)}; "
            f"cards larger than their record: {larger}")


def run(folder: Path, *, min_turns: int = 10, seeds: int = 3, generated_turns: int = 30,
        n_ctx: int = LOCAL_N_CTX, files: str = "*") -> list[Figures]:
    profile = local_profile(n_ctx)
    with tempfile.TemporaryDirectory(prefix="vak-history") as tmp:
        store = LedgerStore(Path(tmp) / "ledger")
        try:
            sessions = [*recorded(store, folder, min_turns, files), *generated(store, seeds, generated_turns)]
            return [measure(store, s, name, profile, rec) for s, name, rec in sessions]
        finally:
            store.close()


def main(argv: Sequence[str] | None = None) -> list[Figures]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--trajectories", type=Path, default=TRAJECTORIES)
    ap.add_argument("--min-turns", type=int, default=10, help="recorded sessions with at least this many turns")
    ap.add_argument("--generated", type=int, default=3, help="generated sessions (seeds 0..N-1)")
    ap.add_argument("--generated-turns", type=int, default=30, help="closed turns per generated session")
    ap.add_argument("--files", default="*", help="only the recorded files matching this glob (e.g. 'tau-bench*')")
    args = ap.parse_args(argv)
    figures = run(args.trajectories, min_turns=args.min_turns, seeds=args.generated,
                  generated_turns=args.generated_turns, files=args.files)
    print(f"local {LOCAL_N_CTX // 1024}k profile; follow-up: {FOLLOW_UP!r}; goals: median card <= {CARD_GOAL}, "
          f"a {SHAPE_TURNS}-turn session's history < {HISTORY_GOAL:,}")
    print(f"{'session':40} {'turns':>5} {'history':>8} {'least':>6} {'full':>4} {'cards':>5} {'packet':>6} "
          f"{'card med':>8} {'card max':>8} {'rendered med':>12} {'fallback':>8} {'larger':>6}")
    for f in figures:
        print(f"{f.name[:40]:40} {f.turns:>5} {f.history:>8,} {f.coverage:>6,} {f.full:>4} {f.cards:>5} "
              f"{f.packeted:>6} {_median(f.card_tokens):>8} {max(f.card_tokens, default=0):>8} "
              f"{_median(f.rendered):>12} {f.fallbacks:>8} {f.larger:>6}")
    for label, group in (("generated", [f for f in figures if not f.recorded]),
                         ("recorded", [f for f in figures if f.recorded])):
        rendered = [c for f in group for c in f.rendered]
        print(f"{label} sessions: rendered cards median {_median(rendered)} tokens, "
              f"{sum(f.fallbacks for f in group)} of {len(rendered)} longer than their record (such a turn's "
              f"card is its record: it is carried Full); {summary(group)}")
    print(summary([f for f in figures if f.recorded]))
    return figures


if __name__ == "__main__":
    main()
