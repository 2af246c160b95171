"""BFCL v4 multi-turn against a model that degrades past its horizon (:class:`~.scripted.DegradingModel`),
at several thresholds T, direct and through the engine, scored by BFCL's own checker: what the engine buys.

Per T: the scripted upstream on 127.0.0.1, probed first by the engine's own probe (the ladder with its
negative control, ``ProbeRunner``), the probe recorded in every ledger the engine opens (as ``vak probe
--ledger`` records it), so the engine learns T only from what the probe measured. Then per entry:

* **direct**: BFCL's FC handler's requests (:func:`~.modes.run_direct`);
* **engine**: the caller's loop through the public API, a fresh ledger per entry (:func:`~.modes.run_engine`);
* **serve**: the direct client pointed at ``vak serve`` in front of the same upstream (started by the
  caller's ``start_serve``: ``bench/bfcl_degrade.py`` starts a child), its ledger holding the probe, each
  entry its own session; its sizes are the upstream calls' (the receipts).

And once, the reference: the same upstream with no threshold (the perfect model), direct.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from vak_context.errors import InvalidInput
from vak_context.farm.bfcl.modes import EntryRun, Sent, Target, run_direct, run_engine
from vak_context.farm.bfcl.multiturn import Entry
from vak_context.farm.bfcl.scripted import DECLARED_WINDOW, DegradingModel, loopback

MODES = ("direct", "engine", "serve")
# Starts vak serve in front of the upstream (``Target``), on the given ledger, for the ExitStack's life, and
# returns the Target that reaches it (its base URL and its client key's headers).
StartServe = Callable[[ExitStack, Path, Target], Target]
THRESHOLDS = (4_096, 8_192, 16_384)
MODEL = "degrading"
KEY = "bfcl-scripted-key"  # the loopback upstream checks no key; the engine's provider wants one to send


@dataclass(frozen=True)
class ProbeFigure:
    """What the engine's probe measured on one upstream: its horizon (billed tokens of the largest rung it
    followed, by majority), whether the negative control stayed clean at every rung it followed, and the
    rungs (target, billed, followed/asked, control calls)."""

    horizon: int
    clean_controls: bool
    rungs: tuple[tuple[int, int | None, int, int, int], ...]

    def line(self) -> str:
        rungs = ", ".join(f"{b or t}:{f}/{a}{'' if c == 0 else f' ctl{c}'}" for t, b, f, a, c in self.rungs)
        return (f"probe horizon {self.horizon:,} tokens, negative control "
                f"{'clean' if self.clean_controls else 'NOT clean'} (rungs billed:followed/asked {rungs})")


@dataclass
class ThresholdRun:
    threshold: int | None  # None: the perfect model (never degrades)
    probe: ProbeFigure | None
    runs: list[EntryRun] = field(default_factory=list)


async def probe(base_url: str, client: httpx.AsyncClient) -> tuple[ProbeFigure, list[Any]]:
    """The engine's probe against the upstream, and the ledger payloads it writes (activity, profile)."""
    from vak_context.agent.probe import ProbeRunner, ProbeSettings
    from vak_context.context.capacity.profile import ProfileKey
    from vak_context.providers.registry import make_provider

    provider, _ = make_provider(f"openai-compat:{MODEL}", client, base_url=base_url, api_key=KEY, timeout_s=600.0)
    report = await ProbeRunner(provider, ProfileKey("openai-compat", MODEL), settings=ProbeSettings()).run()
    pooled = report.ladder.pooled or report.ladder.outcomes
    rungs = tuple(sorted((o.target, o.prompt_tokens, o.followed, len(o.instructions), o.control_calls)
                         for o in pooled))
    clean = all(o.control_calls == 0 for o in pooled if o.passed or o.followed)
    return ProbeFigure(report.profile.instruction_horizon.tokens, clean, rungs), list(report.ledger_payloads())


def record_probe(folder: Path, payloads: Sequence[Any]) -> None:
    """The probe's activity and profile in ``folder``'s ledger, session "capacity" (as ``vak probe --ledger``)."""
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(folder) as store:
        store.append("capacity", list(payloads))


def upstream_sizes(runs: Sequence[EntryRun], ledger: Path) -> None:
    """The serve mode's requests as the upstream saw them, from the receipts vak serve wrote (one per model
    call; a client request's usage sums every upstream call it took). Rejected requests keep theirs."""
    from vak_context.events.envelope import Mapper
    from vak_context.storage.ledger import LedgerStore

    mapper = Mapper()
    with LedgerStore(ledger, readonly=True) as store:
        sessions = set(store.sessions())
        for run in (r for r in runs if r.mode == "serve" and r.session in sessions):
            usages = [mapper.payload_of(e).usage for e in store.entries(run.session) if e.kind == "receipt"]
            refused = [s for s in run.sent if s.status != 200]
            run.sent = [Sent(200, u.prompt_tokens, u.cache_read_tokens, False) for u in usages] + refused


async def run_threshold(entries: Sequence[Entry], threshold: int | None, *, modes: Sequence[str] = MODES,
                        work: Path | None = None, timeout: float = 600.0,
                        on_entry: Callable[[EntryRun], None] | None = None,
                        on_probe: Callable[[ProbeFigure], None] | None = None,
                        start_serve: StartServe | None = None) -> ThresholdRun:
    """``entries`` in each of ``modes`` against the upstream at ``threshold`` (None: the perfect model,
    direct only, no probe). Ledgers go under ``work`` (a fresh temporary folder by default). The mode
    "serve" needs ``start_serve`` (``vak serve`` is a layer above the farm: the caller starts it)."""
    root = work or Path(tempfile.mkdtemp(prefix="vak-bfcl-degrade-"))
    root.mkdir(parents=True, exist_ok=True)
    model = DegradingModel(entries, threshold, name=MODEL)
    out = ThresholdRun(threshold, None)
    with ExitStack() as stack:
        upstream = stack.enter_context(loopback(model))
        target = Target(upstream.base_url, MODEL, {"Authorization": f"Bearer {KEY}"}, KEY)
        async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
            payloads: list[Any] = []
            if threshold is not None and ({"engine", "serve"} & set(modes)):
                out.probe, payloads = await probe(upstream.base_url, client)
                if on_probe is not None:
                    on_probe(out.probe)
            via = serve_ledger = None
            if threshold is not None and "serve" in modes:
                if start_serve is None:
                    raise InvalidInput("the mode 'serve' needs start_serve: what starts vak serve in front of the "
                                       "upstream (bench/bfcl_degrade.py passes one)")
                serve_ledger = root / "serve-ledger"
                record_probe(serve_ledger, payloads)
                via = start_serve(stack, serve_ledger, target)

            def done(run: EntryRun) -> None:
                out.runs.append(run)
                if on_entry is not None:
                    on_entry(run)

            for n, entry in enumerate(entries):
                model.focus(entry.id)
                if "direct" in modes or threshold is None:
                    done(await run_direct(entry, target, client))
                if threshold is None:
                    continue
                if "engine" in modes:
                    folder = root / f"engine-{entry.id}-{n}"
                    record_probe(folder, payloads)
                    done((await run_engine(entry, target, client, folder, window=DECLARED_WINDOW))[0])
                if via is not None and serve_ledger is not None:
                    run = await run_direct(entry, via, client, session=f"bfcl-{entry.id}-{n}")
                    run.mode = "serve"
                    upstream_sizes([run], serve_ledger)  # its receipts are written before its replies go out
                    done(run)
    return out




# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    category: str
    threshold: int | None
    mode: str
    entries: int
    passed: int
    requests: int
    over: int  # requests larger than T (by the upstream's count)
    mean_prompt: float
    max_prompt: int
    prompt_per_entry: float
    reference: int | None = None  # the perfect model's passes on the same entries (where it ran them)

    @property
    def accuracy(self) -> float:
        return self.passed / self.entries if self.entries else 0.0


def rows(run: ThresholdRun, perfect: Mapping[str, bool] | None = None) -> list[Row]:
    """One row per (category, mode); ``perfect``: the perfect model's verdict per entry id."""
    perfect = perfect or {}
    groups: dict[tuple[str, str], list[EntryRun]] = {}
    for r in run.runs:
        groups.setdefault((r.category, r.mode), []).append(r)
    out = []
    for (category, mode), runs in groups.items():
        sizes = [s.prompt_tokens for r in runs for s in r.sent if s.prompt_tokens]
        over = sum(s > run.threshold for s in sizes) if run.threshold is not None else 0
        out.append(Row(category, run.threshold, "perfect" if run.threshold is None else mode, len(runs),
                       sum(r.verdict.valid for r in runs), sum(len(r.sent) for r in runs), over,
                       sum(sizes) / len(sizes) if sizes else 0.0, max(sizes, default=0),
                       sum(sizes) / len(runs) if runs else 0.0,
                       sum(perfect[r.entry_id] for r in runs) if all(r.entry_id in perfect for r in runs) else None))
    return out


SCHEMA_NOTE = "by construction: direct sends the entry's ~5.7k tokens of schemas on every request, over T"


def table(runs: Sequence[ThresholdRun]) -> str:
    """Accuracy per category, T and mode, prompt tokens per entry, the probe's result beside each T, and
    the goals (engine and serve equal the perfect model at every T; direct falls as T shrinks)."""
    lines = []
    for run in runs:
        if run.probe is not None:
            lines.append(f"T={run.threshold:,}: {run.probe.line()}")
    head = (f"{'category':<24} {'T':>7} {'probe':>7} {'mode':<8} {'acc':>11} {'perfect':>8} {'tok/entry':>10} "
            f"{'mean tok':>9} {'max tok':>8} {'>T':>6}")
    lines += [head, "-" * len(head)]
    perfect = {r.entry_id: r.verdict.valid for run in runs if run.threshold is None for r in run.runs}
    every = [(run, r) for run in runs for r in rows(run, perfect)]
    every.sort(key=lambda x: (x[1].category, -(x[1].threshold or 10**9), MODES.index(x[1].mode)
                              if x[1].mode in MODES else -1))
    for run, r in every:
        t = "none" if r.threshold is None else f"{r.threshold:,}"
        p = f"{run.probe.horizon:,}" if run.probe else "-"
        note = f"  ({SCHEMA_NOTE})" if r.mode == "direct" and r.threshold is not None and r.threshold < 5_700 else ""
        ref = "-" if r.reference is None else f"{r.reference}/{r.entries}"
        lines.append(f"{r.category:<24} {t:>7} {p:>7} {r.mode:<8} {r.passed:>3}/{r.entries:<3} {r.accuracy:>4.0%} "
                     f"{ref:>8} {r.prompt_per_entry:>10,.0f} {r.mean_prompt:>9,.0f} {r.max_prompt:>8,} {r.over:>6}{note}")
    lines += [f"goal {g}" for g in goals([r for _, r in every])]
    return "\n".join(lines)


def goals(all_rows: Sequence[Row]) -> list[str]:
    out = []
    for r in all_rows:
        if r.mode in ("engine", "serve") and r.reference is not None:
            met = r.passed == r.reference
            out.append(f"{r.category} T={r.threshold:,} {r.mode} accuracy = the perfect model's on the same "
                       f"entries: {'met' if met else 'NOT met'} ({r.passed}/{r.entries} vs {r.reference}/{r.entries})")
    for category in sorted({r.category for r in all_rows}):
        direct = sorted((r for r in all_rows if r.category == category and r.mode == "direct"),
                        key=lambda r: -(r.threshold or 0))
        if len(direct) > 1:
            falls = all(a.accuracy >= b.accuracy for a, b in itertools.pairwise(direct))
            figures = ", ".join(f"T={r.threshold:,} {r.passed}/{r.entries}" for r in direct)
            out.append(f"{category} direct falls as T shrinks: {'met' if falls else 'NOT met'} ({figures})")
    return out


def dump(runs: Sequence[ThresholdRun]) -> str:
    """Every entry's verdict and request sizes as JSON lines (what the table is computed from)."""
    return "\n".join(json.dumps({"T": run.threshold, "entry": r.entry_id, "category": r.category, "mode": r.mode,
                                 "passed": r.verdict.valid, "error": r.verdict.error_type,
                                 "sent": [s.prompt_tokens for s in r.sent]}) for run in runs for r in run.runs)
