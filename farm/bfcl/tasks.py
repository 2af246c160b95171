"""The farm's ``bfcl_history`` and ``bfcl_degrade`` units (issue 36 items 2 and 1 as farm tasks), and what
``vak farm report`` makes of their rows: the bench's tables and accuracy against request size, one line per
mode, the measured horizon marked (:mod:`.plot`).

* ``bfcl_history`` (:func:`history_unit`): one (model, category): the model probed first at the task's window
  (unless the spec gives its horizon), then the category's first entries after each history size K, in
  each mode (:func:`~.history.run_sizes`); one row per (entry, K, mode).
* ``bfcl_degrade`` (:func:`degrade_unit`): one (T, category) against the scripted model that degrades past T,
  served on 127.0.0.1 by the unit itself (:func:`~.degrade.run_threshold`, probe included); the unit
  named ``perfect`` is the same model with no T, direct. One row per (entry, mode).

A row keeps the verdict (``passed``, BFCL's error type as ``reason``), the checked request's size
(``request_tokens``: for bfcl_history the request whose reply was checked, for bfcl_degrade the entry's
largest), the measured horizon, and in ``detail`` what the report rebuilds the runs from.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from vak_context.farm.model_units import Endpoint
from vak_context.farm.rows import UnitKey, make_row
from vak_context.farm.spec import BfclDegradeTask, BfclHistoryTask, ModelEntry


def scripted_model(name: str, threshold: int | None) -> ModelEntry:
    """The spec-side entry of a bfcl_degrade unit's model (it is served by the unit, never looked up)."""
    from vak_context.farm.bfcl.scripted import DECLARED_WINDOW

    return ModelEntry(name=name, kind="endpoint", model="degrading", window=DECLARED_WINDOW,
                      horizon=threshold)


# ---------------------------------------------------------------- bfcl_history


async def history_unit(unit: UnitKey, run_id: str, node: str, model: ModelEntry, task: BfclHistoryTask,
                       endpoint: Endpoint, *, work: Path) -> list[dict[str, Any]]:
    from vak_context.farm.bfcl.history import cut, read_history, run_sizes, writes_calls_as_text
    from vak_context.farm.bfcl.single import load_single
    from vak_context.farm.bfcl.unit import target_of

    target = target_of(endpoint)
    window = task.window or endpoint.n_ctx or model.declared_window
    work.mkdir(parents=True, exist_ok=True)
    ledgers = Path(tempfile.mkdtemp(prefix="try-", dir=work))
    recording = read_history(task.history, task.select)
    entries = load_single(unit.session, task.entries)
    async with httpx.AsyncClient(trust_env=False, timeout=900.0) as client:
        horizon, line, payloads = model.horizon, "", list[Any]()
        if horizon is None:
            horizon, line, payloads = await probe_target(target, client, window, endpoint.local_model)
        runs = await run_sizes(entries, task.sizes, recording, target, client, ledgers, modes=task.modes,
                               window=window, horizon=model.horizon, probe=payloads, max_tokens=task.max_tokens,
                               text_calls=writes_calls_as_text(endpoint.local_model))
    history = {k: cut(recording, k).tokens for k in task.sizes}
    return [make_row(unit, "bfcl_history", run_id, n, passed=r.verdict.valid, reason=r.verdict.error_type,
                     node=node, horizon=horizon, window=window, request_tokens=r.size, wall_ms=r.seconds * 1000,
                     detail={"entry": r.entry_id, "mode": r.mode, "k": r.k, "history": history[r.k],
                             "sent": [s.prompt_tokens for s in r.sent], "probe": line,
                             "recording": recording.name})
            for n, r in enumerate(runs)]


async def probe_target(target: Any, client: httpx.AsyncClient, window: int, local: str = "") -> tuple[int, str, list[Any]]:
    """The engine's probe of ``target`` (a :class:`~.modes.Target`) at ``window``: its horizon, a line
    saying what it measured, and the ledger payloads (activity, profile) each engine ledger records."""
    from vak_context.agent.probe import ProbeRunner, ProbeSettings
    from vak_context.context.capacity.profile import ProfileKey
    from vak_context.providers.local.catalogue import local_protocol
    from vak_context.providers.registry import make_provider

    provider, _ = make_provider(target.spec, client, base_url=target.base_url, api_key=target.api_key or "none",
                                timeout_s=900.0)
    settings = ProbeSettings(window=window, protocol=local_protocol(local) if local else "native")
    report = await ProbeRunner(provider, ProfileKey("openai-compat", target.model), settings=settings).run()
    pooled = sorted(report.ladder.pooled or report.ladder.outcomes, key=lambda o: o.target)
    rungs = ", ".join(f"{o.prompt_tokens or o.target}:{o.followed}/{len(o.instructions)}"
                      f"{'' if not o.control_calls else f' ctl{o.control_calls}'}" for o in pooled)
    horizon = report.profile.instruction_horizon.tokens
    line = f"probe at window {window:,}: horizon {horizon:,} tokens (rungs tokens:followed/asked {rungs})"
    return horizon, line, list(report.ledger_payloads())


def history_runs(rows: list[dict[str, Any]]) -> list[Any]:
    from vak_context.farm.bfcl.history import Asked
    from vak_context.farm.bfcl.modes import Sent
    from vak_context.farm.bfcl.multiturn import Verdict

    out = []
    for r in rows:
        d = json.loads(r["detail"] or "{}")
        sent = [Sent(200, int(t), 0, False) for t in d.get("sent", [])]
        out.append(Asked(d["entry"], r["session"], int(d["k"]), d["mode"], Verdict(bool(r["passed"]), r["reason"]),
                         sent, int(d.get("history", 0)), float(r["wall_ms"] or 0) / 1000))
    return out


# ---------------------------------------------------------------- bfcl_degrade


async def degrade_unit(unit: UnitKey, run_id: str, node: str, task: BfclDegradeTask, model: ModelEntry, *,
                       work: Path) -> list[dict[str, Any]]:
    from vak_context.farm.bfcl.degrade import DECLARED_WINDOW, run_threshold
    from vak_context.farm.bfcl.multiturn import load_entries

    work.mkdir(parents=True, exist_ok=True)
    threshold = model.horizon
    run = await run_threshold(load_entries(unit.session, task.entries), threshold,
                              modes=[m for m in task.modes if m != "serve"],
                              work=Path(tempfile.mkdtemp(prefix="try-", dir=work)))
    probe = run.probe
    detail_probe = None if probe is None else {"horizon": probe.horizon, "clean": probe.clean_controls,
                                               "rungs": [list(x) for x in probe.rungs]}
    return [make_row(unit, "bfcl_degrade", run_id, n, passed=r.verdict.valid, reason=r.verdict.error_type, node=node,
                     horizon=probe.horizon if probe else None, window=DECLARED_WINDOW, budget=threshold,
                     request_tokens=r.max_request, wall_ms=r.seconds * 1000,
                     detail={"entry": r.entry_id, "mode": "perfect" if threshold is None else r.mode,
                             "threshold": threshold, "sent": [s.prompt_tokens for s in r.sent], "probe": detail_probe})
            for n, r in enumerate(run.runs)]


def degrade_runs(rows: list[dict[str, Any]]) -> list[Any]:
    """The rows as the bench's ThresholdRuns (one per T; the perfect model's with T None)."""
    from vak_context.farm.bfcl.degrade import ProbeFigure, ThresholdRun
    from vak_context.farm.bfcl.modes import EntryRun, Sent
    from vak_context.farm.bfcl.multiturn import Verdict

    by: dict[int | None, ThresholdRun] = {}
    for r in rows:
        d = json.loads(r["detail"] or "{}")
        t = d.get("threshold")
        p = d.get("probe")
        run = by.setdefault(t, ThresholdRun(t, ProbeFigure(p["horizon"], p["clean"], tuple(tuple(x) for x in p["rungs"]))
                                            if p else None))
        mode = "direct" if d["mode"] == "perfect" else d["mode"]
        run.runs.append(EntryRun(d["entry"], r["session"], mode, Verdict(bool(r["passed"]), r["reason"]),
                                 [Sent(200, int(x), 0, False) for x in d.get("sent", [])]))
    return [by[t] for t in sorted(by, key=lambda t: -1 if t is None else t)]


# ---------------------------------------------------------------- the report


def report_sections(rows: list[dict[str, Any]]) -> list[str]:
    """report.md's sections for both kinds: the bench's tables, per task (and model)."""
    from vak_context.farm.bfcl.degrade import table as degrade_table
    from vak_context.farm.bfcl.history import table as history_table

    out: list[str] = []
    history = [r for r in rows if r["kind"] == "bfcl_history"]
    if history:
        out += ["## BFCL single-turn after recorded history: direct and through the engine", ""]
        for (task, model), rs in sorted(_groups(history, "task", "model").items()):
            horizon = max((int(r["horizon"] or 0) for r in rs), default=0) or None
            window = max(int(r["window"] or 0) for r in rs)
            probe = next((json.loads(r["detail"]).get("probe") for r in rs if json.loads(r["detail"]).get("probe")), "")
            out += [f"### {task} / {model} (window {window:,})", "", "```",
                    history_table(history_runs(rs), horizon, window, probe_line=probe), "```", ""]
    degrade = [r for r in rows if r["kind"] == "bfcl_degrade"]
    if degrade:
        out += ["## BFCL multi-turn against a model that degrades past T: direct and through the engine", ""]
        for task, rs in sorted(_groups(degrade, "task").items()):
            out += [f"### {task[0]}", "", "```", degrade_table(degrade_runs(rs)), "```", ""]
    return out


def plots(run_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Accuracy against request size, one line per mode, the measured horizon marked: one PNG per
    bfcl_history (task, model) and per bfcl_degrade (task, T)."""
    from vak_context.farm.bfcl.plot import plot_points

    paths = []
    history = [r for r in rows if r["kind"] == "bfcl_history"]
    for (task, model), rs in sorted(_groups(history, "task", "model").items()):
        horizon = max((int(r["horizon"] or 0) for r in rs), default=0) or None
        points = [(json.loads(r["detail"])["mode"], int(r["request_tokens"] or 0), bool(r["passed"])) for r in rs]
        paths.append(plot_points(points, horizon, run_dir / f"bfcl_history_{task}_{model}.png",
                                 title=f"{task} / {model}: BFCL single-turn after recorded history"))
    degrade = [r for r in rows if r["kind"] == "bfcl_degrade" and r["budget"] is not None]
    for (task, threshold), rs in sorted(_groups(degrade, "task", "budget").items()):
        horizon = max((int(r["horizon"] or 0) for r in rs), default=0) or None
        points = [(json.loads(r["detail"])["mode"], int(r["request_tokens"] or 0), bool(r["passed"])) for r in rs]
        paths.append(plot_points(points, horizon, run_dir / f"bfcl_degrade_{task}_T{threshold}.png",
                                 title=f"{task}: BFCL multi-turn, the model degrades past T = {threshold:,}",
                                 xlabel="an entry's largest request (prompt tokens)"))
    return paths


def _groups(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out
