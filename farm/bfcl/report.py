"""Running BFCL categories in both modes and the figures per category and mode, with the goals beside them:
what ``bench/bfcl.py`` prints and the farm's ``bfcl`` task reports (:mod:`.multiturn`, :mod:`.modes`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from vak_context.errors import InvalidInput
from vak_context.farm.bfcl.modes import EntryRun, Target, run_direct, run_engine
from vak_context.farm.bfcl.multiturn import load_entries

MODES = ("direct", "engine")
ALL_MODES = (*MODES, "serve")  # "serve": the direct client pointed at vak serve (bench/bfcl.py starts one)
FULL = 200  # entries per BFCL multi-turn category: the extrapolated full run
SIZE_BANDS = ((0.0, 0.5), (0.5, 1.0), (1.0, float("inf")))  # an entry's largest request / the horizon


@dataclass
class Run:
    runs: list[EntryRun]
    horizon: int  # the measured horizon the engine planned against (the same for the direct requests' count)


async def run_categories(categories: Sequence[str], entries: int, target: Target, client: httpx.AsyncClient, *,
                         modes: Sequence[str] = MODES, window: int = 16_384, horizon: int | None = None,
                         folder: Path | None = None, via: Target | None = None,
                         on_entry: Callable[[EntryRun], None] | None = None) -> Run:
    """The first ``entries`` of each category in each mode (engine: a fresh ledger per entry under
    ``folder``). ``via``: vak serve (its base URL and its client key's headers), for the mode "serve" (the
    direct client pointed there, each entry named by the session header). ``on_entry`` sees each entry's
    run in each mode as it ends (progress)."""
    if "serve" in modes and via is None:
        raise InvalidInput("the mode 'serve' needs vak serve's address: pass via=Target(base_url, model, headers)")
    root = folder or Path(tempfile.mkdtemp(prefix="vak-bfcl-ledgers-"))
    out: list[EntryRun] = []
    planned = horizon or 0
    served = via if "serve" in modes else None

    def done(run: EntryRun) -> None:
        out.append(run)
        if on_entry is not None:
            on_entry(run)

    for category in categories:
        for entry in load_entries(category, entries):
            if "direct" in modes:
                done(await run_direct(entry, target, client))
            if "engine" in modes:
                run, planned = await run_engine(entry, target, client, root / f"{entry.id}-{len(out)}",
                                                window=window, horizon=horizon)
                done(run)
            if served is not None:
                run = await run_direct(entry, served, client, session=f"bfcl-{entry.id}-{len(out)}")
                run.mode = "serve"
                done(run)
    return Run(out, planned or window)


@dataclass(frozen=True)
class Figures:
    category: str
    mode: str
    entries: int
    passed: int
    requests: int
    mean_prompt: float
    max_prompt: int
    prompt_per_entry: float
    over_horizon: int
    rejected: int
    cached_share: float
    seconds_per_entry: float
    bands: tuple[tuple[int, int], ...]  # (passed, entries) per SIZE_BANDS

    @property
    def accuracy(self) -> float:
        return self.passed / self.entries if self.entries else 0.0

    @property
    def full_run_minutes(self) -> float:
        return self.seconds_per_entry * FULL / 60


def figures(run: Run) -> list[Figures]:
    groups: dict[tuple[str, str], list[EntryRun]] = {}
    for r in run.runs:
        groups.setdefault((r.category, r.mode), []).append(r)
    return [_figures(c, m, rs, run.horizon) for (c, m), rs in groups.items()]


def _figures(category: str, mode: str, runs: list[EntryRun], horizon: int) -> Figures:
    sizes = [s.prompt_tokens for r in runs for s in r.sent if s.prompt_tokens]
    prompt, cached = sum(sizes), sum(s.cached_tokens for r in runs for s in r.sent)
    bands = []
    for low, high in SIZE_BANDS:
        inside = [r for r in runs if low < r.max_request / horizon <= high or (low == 0 and not r.max_request)]
        bands.append((sum(r.verdict.valid for r in inside), len(inside)))
    n = len(runs)
    return Figures(category, mode, n, sum(r.verdict.valid for r in runs), sum(len(r.sent) for r in runs),
                   prompt / len(sizes) if sizes else 0.0, max(sizes, default=0), prompt / n,
                   sum(s > horizon for s in sizes), sum(s.over_length for r in runs for s in r.sent),
                   cached / prompt if prompt else 0.0, sum(r.seconds for r in runs) / n, tuple(bands))


def table(rows: Iterable[Figures], horizon: int) -> str:
    """The figures as one plain table per category, the modes side by side, then the goals."""
    rows = list(rows)
    lines = [f"horizon (measured, planned against): {horizon} tokens"]
    head = (f"{'category':<24} {'mode':<7} {'acc':>9} {'mean tok':>9} {'max tok':>8} {'tok/entry':>10} "
            f"{'>horizon':>8} {'rejected':>8} {'cached':>7} {'s/entry':>8} {'full run':>9}")
    lines += [head, "-" * len(head)]
    for f in rows:
        lines.append(f"{f.category:<24} {f.mode:<7} {f.passed:>3}/{f.entries:<3} {f.accuracy:>3.0%} "
                     f"{f.mean_prompt:>9.0f} {f.max_prompt:>8} {f.prompt_per_entry:>10.0f} {f.over_horizon:>8} "
                     f"{f.rejected:>8} {f.cached_share:>7.1%} {f.seconds_per_entry:>8.1f} "
                     f"{f.full_run_minutes:>7.1f}m")
    for f in rows:
        if "long_context" in f.category:
            bands = ", ".join(f"{_band(lo, hi)}: {p}/{n}" for (lo, hi), (p, n) in zip(SIZE_BANDS, f.bands, strict=True))
            lines.append(f"{f.category} {f.mode}: accuracy by largest request / horizon: {bands}")
    lines += [f"goal {g}" for g in goals(rows)]
    return "\n".join(lines)


def _band(low: float, high: float) -> str:
    return f"<= {high:g}" if low == 0 else f"> {low:g}" if high == float("inf") else f"{low:g}-{high:g}"


def goals(rows: Sequence[Figures]) -> list[str]:
    """Each goal with its figures and met / NOT met, for each mode through the engine (engine, serve) that
    ran beside direct: accuracy at least direct's, prompt tokens per entry at most half of direct's on
    long_context, no request over the horizon."""
    by = {(f.category, f.mode): f for f in rows}
    out = []
    for category in sorted({f.category for f in rows}):
        direct = by.get((category, "direct"))
        for mode in ("engine", "serve"):
            engine = by.get((category, mode))
            if direct is None or engine is None:
                continue
            out.append(_goal(f"{category}: {mode} accuracy >= direct's", engine.accuracy >= direct.accuracy,
                             f"{engine.accuracy:.0%} vs {direct.accuracy:.0%}"))
            if "long_context" in category:
                out.append(_goal(f"{category}: {mode} tokens/entry <= half of direct's",
                                 engine.prompt_per_entry <= direct.prompt_per_entry / 2,
                                 f"{engine.prompt_per_entry:.0f} vs {direct.prompt_per_entry:.0f}"))
            out.append(_goal(f"{category}: no {mode} request over the horizon", engine.over_horizon == 0,
                             f"{engine.over_horizon} over"))
    return out


def _goal(what: str, met: bool, figures: str) -> str:
    return f"{what}: {'met' if met else 'NOT met'} ({figures})"
