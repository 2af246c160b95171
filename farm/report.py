"""`vak farm report RUN`: a farm run's table as a Markdown report and PNGs a person can look at.

* ``report.md``: per task kind, the figures a researcher compares. Probe: each model's measured horizon
  and its rungs. Replay: per model and session, the requests checked and failed, the largest request
  against its budget, the fidelity mix and the packet ranges, with the reasons of failures. Live: runs
  that showed the expected outcome against the task's ``require``. BFCL: per model and category, the
  modes side by side (accuracy, tokens, requests over the horizon, cached share) and the bench's goals.
  bfcl_history and bfcl_degrade: the tables ``bench/bfcl_history.py`` and ``bench/bfcl_degrade.py`` print
  (vak_context.farm.bfcl.tasks).
  Then every unit that could not run.
* ``horizon_curves.png``: for each model, the share of probe samples that followed the instruction
  against prompt tokens, with the measured horizon marked ("curves for any model, one command").
* ``session_<name>.png``: one session under each model, side by side: request size per request (with
  each model's budget), and the fidelity mix per model: how its requests carried the session's tool
  results (verbatim, windowed, digested, packeted, behind a reset, missing).
* ``bfcl_history_<task>_<model>.png``, ``bfcl_degrade_<task>_T<T>.png``: accuracy against request size, one
  line per mode, the measured horizon marked (vak_context.farm.bfcl.plot).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vak_context.errors import InvalidInput, MissingExtra
from vak_context.extras import has_extra, pyplot
from vak_context.farm.rows import RESULTS_SCHEMA, UNIT_FAILED

REPORT_FILE = "report.md"
HORIZON_PNG = "horizon_curves.png"
FIDELITIES = ("full_turns", "card_turns", "packet_turns", "reset_turns")
RESULT_FORMS = ("verbatim_results", "windowed_results", "digested_results", "packeted_results", "reset_results",
                "missing_results")


def load_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "results.parquet"
    if not path.is_file():
        raise InvalidInput(f"no results.parquet in {run_dir}: give a run folder (<out>/<run id>) that "
                           "`vak farm run` wrote, or run the farm first.")
    rows: list[dict[str, Any]] = pq.read_table(path, schema=RESULTS_SCHEMA).to_pylist()
    return rows


def _spec_tasks(run_dir: Path) -> dict[str, dict[str, Any]]:
    marker = run_dir / "spec.json"
    if not marker.is_file():
        return {}
    spec = json.loads(marker.read_text(encoding="utf-8")).get("spec", {})
    return {t["name"]: t for t in spec.get("tasks", [])}


def write_report(run_dir: Path) -> list[Path]:
    """Write report.md and the PNGs into ``run_dir``; returns their paths, the report first."""
    run_dir = Path(run_dir)
    rows = load_rows(run_dir)
    tasks = _spec_tasks(run_dir)
    ok = [r for r in rows if r["request"] != UNIT_FAILED]
    lines = [f"# Farm run `{run_dir.name}`", "",
             f"{len(rows)} rows; {len({(r['task'], r['model'], r['session']) for r in rows})} units; "
             f"models: {', '.join(sorted({r['model'] for r in rows}))}; "
             f"nodes: {len({r['node'] for r in ok if r['node']})}.", ""]
    lines += _probe_section([r for r in ok if r["kind"] == "probe"])
    lines += _replay_section([r for r in ok if r["kind"] == "replay"])
    lines += _live_section([r for r in ok if r["kind"] == "live"], tasks)
    lines += _bfcl_section([r for r in ok if r["kind"] == "bfcl"])
    if any(r["kind"] in ("bfcl_history", "bfcl_degrade") for r in ok):
        from vak_context.farm.bfcl.tasks import report_sections

        lines += report_sections(ok)
    failed = [r for r in rows if r["request"] == UNIT_FAILED]
    if failed:
        lines += ["## Units that could not run", "", "| task | model | session | reason |", "|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['model']} | {r['session'] or '-'} | {_cell(r['reason'])} |" for r in failed]
        lines.append("")
    pngs = _plots(run_dir, ok)
    if pngs:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    elif not has_extra("plots"):
        lines += ["## Plots", "", f"No PNGs: {MissingExtra('plots', 'drawing them').args[0]}", ""]
    report = run_dir / REPORT_FILE
    report.write_text("\n".join(lines), encoding="utf-8")
    return [report, *pngs]


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _probe_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["## Probe: the instruction horizon per model", "",
           "| task | model | horizon | window | rungs passed | largest rung (tokens) |", "|---|---|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["model"])].append(r)
    for (task, model), rs in sorted(groups.items()):
        out.append(f"| {task} | {model} | {rs[0]['horizon'] or 0:,} | {rs[0]['window'] or 0:,} | "
                   f"{sum(r['passed'] for r in rs)}/{len(rs)} | {max(r['request_tokens'] or 0 for r in rs):,} |")
    return [*out, ""]


def _replay_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["## Replay: every recorded request, projected under each model", "",
           "| model | session | requests | failed | largest request / budget | full / card / packet / reset turns "
           "| results verbatim / windowed / digested / packeted / reset / missing | packets | why failed |",
           "|---|---|---:|---:|---:|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["session"])].append(r)
    for (model, session), rs in sorted(groups.items()):
        failed = [r for r in rs if not r["passed"]]
        biggest = max(rs, key=lambda r: r["request_tokens"] or 0)
        fid = " / ".join(str(sum(r[f] or 0 for r in rs)) for f in FIDELITIES)
        forms = " / ".join(str(sum(r[f] or 0 for r in rs)) for f in RESULT_FORMS)
        packets = sorted({(r["packet_first"], r["packet_last"]) for r in rs if r["packet_first"] is not None})
        why = Counter(r["reason"].split(":")[0] for r in failed).most_common(3)
        out.append(f"| {model} | {session} | {len(rs)} | {len(failed)} | {biggest['request_tokens'] or 0:,} / "
                   f"{biggest['budget'] or 0:,} | {fid} | {forms} | "
                   f"{', '.join(f'{a}–{b}' for a, b in packets) or 'none'} | "
                   f"{_cell('; '.join(f'{w} ×{n}' for w, n in why)) or '-'} |")
    return [*out, ""]


def _live_section(rows: list[dict[str, Any]], tasks: dict[str, dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["## Live: directives re-run against the model", "",
           "| task | model | session | expected | showed it | required | verdict |", "|---|---|---|---|---:|---:|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["model"], r["session"])].append(r)
    for (task, model, session), rs in sorted(groups.items()):
        spec = tasks.get(task, {})
        per_directive = max(1, int(spec.get("repeats", len(rs))))
        require = int(spec.get("require", 1))
        directives = max(1, len(rs) // per_directive)
        verdicts = []
        for d in range(directives):
            chunk = rs[d * per_directive:(d + 1) * per_directive]
            verdicts.append(sum(r["passed"] for r in chunk) >= require)
        out.append(f"| {task} | {model} | {session} | {spec.get('expect', '?')} | {sum(r['passed'] for r in rs)}/"
                   f"{len(rs)} | {require} of {per_directive} per directive | "
                   f"{'PASS' if all(verdicts) else 'FAIL'} ({sum(verdicts)}/{len(verdicts)} directives) |")
    return [*out, ""]


def _bfcl_section(rows: list[dict[str, Any]]) -> list[str]:
    """The figures ``bench/bfcl.py`` prints, from the rows (vak_context.farm.bfcl.unit), one line per model and
    category with the modes side by side (direct / engine), then each model's goals."""
    if not rows:
        return []
    from vak_context.farm.bfcl.report import figures, goals
    from vak_context.farm.bfcl.unit import runs_of

    out = ["## BFCL v4 multi-turn: each model's calls made direct and through the engine", "",
           "Each cell is direct / engine. Accuracy is BFCL's own checker; tokens are the server's prompt tokens.", "",
           "| task | model | category | horizon | accuracy | tokens/entry | max request | over horizon | rejected "
           "| cached | s/entry |", "|---|---|---|---:|---|---|---|---|---|---|---|"]
    notes: list[str] = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["model"])].append(r)
    for (task, model), rs in sorted(groups.items()):
        run = runs_of(rs)
        by = {(f.category, f.mode): f for f in figures(run)}
        for category in sorted({c for c, _ in by}):
            fs = [by[(category, m)] for m in ("direct", "engine", "serve") if (category, m) in by]

            def cell(fmt: str, value: Any, fs: list[Any] = fs) -> str:
                return " / ".join(format(value(f), fmt) for f in fs)

            out.append(f"| {task} | {model} | {category} | {run.horizon:,} | "
                       f"{' / '.join(f'{f.passed}/{f.entries} ({f.accuracy:.0%})' for f in fs)} | "
                       f"{cell(',.0f', lambda f: f.prompt_per_entry)} | {cell(',', lambda f: f.max_prompt)} | "
                       f"{cell('d', lambda f: f.over_horizon)} | {cell('d', lambda f: f.rejected)} | "
                       f"{cell('.1%', lambda f: f.cached_share)} | {cell('.1f', lambda f: f.seconds_per_entry)} |")
        notes += [f"- {task}/{model}: goal {g}" for g in goals(list(by.values()))]
    return [*out, "", *notes, *([""] if notes else [])]


def _plots(run_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    if not has_extra("plots"):  # report.md says so instead (write_report)
        return []
    plt = pyplot("the farm report's PNGs")

    paths: list[Path] = []
    probes = [r for r in rows if r["kind"] == "probe"]
    if probes:
        paths.append(_horizon_plot(plt, run_dir, probes))
    replays = [r for r in rows if r["kind"] == "replay"]
    for session in sorted({r["session"] for r in replays}):
        paths.append(_session_plot(plt, run_dir, session, [r for r in replays if r["session"] == session]))
    if any(r["kind"] in ("bfcl_history", "bfcl_degrade") for r in rows):
        from vak_context.farm.bfcl.tasks import plots

        paths += plots(run_dir, rows)
    return paths


def _horizon_plot(plt: Any, run_dir: Path, probes: list[dict[str, Any]]) -> Path:
    """Each model's share of samples that followed the instruction against prompt tokens."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for model in sorted({r["model"] for r in probes}):
        rs = sorted((r for r in probes if r["model"] == model), key=lambda r: r["request_tokens"] or 0)
        shares = []
        for r in rs:
            d = json.loads(r["detail"] or "{}")
            shares.append(d.get("followed", 0) / d["asked"] if d.get("asked") else float(r["passed"]))
        line = ax.plot([r["request_tokens"] for r in rs], shares, "o-", label=model)[0]
        if rs[0]["horizon"]:
            ax.axvline(rs[0]["horizon"], color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("instruction followed (share of samples)")
    ax.set_ylim(-0.05, 1.1)
    ax.set_title("horizon curves per model (dotted: measured horizon)")
    ax.legend(fontsize=8)
    return _save(plt, fig, run_dir / HORIZON_PNG)


def _session_plot(plt: Any, run_dir: Path, session: str, rs: list[dict[str, Any]]) -> Path:
    """One session's replays side by side: request sizes (left) and the fidelity mix (right) per model."""
    models = sorted({r["model"] for r in rs})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for model in models:
        mine = sorted((r for r in rs if r["model"] == model), key=lambda r: r["request"])
        line = left.plot([r["request"] for r in mine], [r["request_tokens"] or 0 for r in mine], ".-",
                         label=model)[0]
        budgets = [r["budget"] for r in mine if r["budget"]]
        if budgets:
            left.axhline(max(budgets), color=line.get_color(), linestyle=":", linewidth=1)
    left.set_xlabel("recorded request")
    left.set_ylabel("request tokens (dotted: budget)")
    left.set_title(f"{session}: request size per model")
    left.legend(fontsize=8)
    bottom = [0.0] * len(models)
    for f in RESULT_FORMS:
        shares = []
        for model in models:
            mine = [r for r in rs if r["model"] == model]
            total = sum(sum(r[g] or 0 for g in RESULT_FORMS) for r in mine) or 1
            shares.append(sum(r[f] or 0 for r in mine) / total)
        right.bar(models, shares, bottom=bottom, label=f.removesuffix("_results"))
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    right.set_ylabel("share of tool results, over all requests")
    right.set_title(f"{session}: fidelity mix per model")
    right.legend(fontsize=8)
    return _save(plt, fig, run_dir / f"session_{session}.png")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
