"""The farm's ``bfcl`` unit: one (model, BFCL category), every entry in each of the task's modes, one row per
(entry, mode); and the rows read back as the runs :mod:`vak_context.farm.bfcl.report` figures.

A row keeps what the report needs to compute the same figures ``bench/bfcl.py`` prints: the verdict
(``passed``, BFCL's error type as ``reason``), the largest request (``request_tokens``), the horizon the
engine planned against, and in ``detail`` the entry, the mode and every request's (status, prompt tokens,
cached tokens, over-length). The model's key stays in the endpoint; no row holds it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from vak_context.farm.bfcl.modes import EntryRun, Sent, Target, run_direct, run_engine
from vak_context.farm.bfcl.multiturn import Verdict, load_entries
from vak_context.farm.bfcl.report import Run
from vak_context.farm.model_units import Endpoint
from vak_context.farm.rows import UnitKey, make_row
from vak_context.farm.spec import BfclTask, ModelEntry


def target_of(endpoint: Endpoint) -> Target:
    """Both modes speak OpenAI chat completions to the endpoint's base URL (a local model's node server or
    an ``endpoint`` model's address)."""
    key = endpoint.api_key
    return Target((endpoint.base_url or "").rstrip("/"), endpoint.local_model or endpoint.spec.partition(":")[2],
                  {"Authorization": f"Bearer {key}"} if key else {}, key)


async def bfcl_unit(unit: UnitKey, run_id: str, node: str, model: ModelEntry, task: BfclTask, endpoint: Endpoint,
                    *, work: Path) -> list[dict[str, Any]]:
    """The first ``task.entries`` of the category ``unit.session`` in each mode. The engine's ledgers go in a
    fresh folder under ``work`` (a retried unit never continues an earlier try's sessions)."""
    target = target_of(endpoint)
    window = task.window or endpoint.n_ctx or model.declared_window
    work.mkdir(parents=True, exist_ok=True)
    ledgers = Path(tempfile.mkdtemp(prefix="try-", dir=work))
    rows: list[dict[str, Any]] = []
    horizon = model.horizon or 0
    async with httpx.AsyncClient(trust_env=False, timeout=900.0) as client:
        for entry in load_entries(unit.session, task.entries):
            for mode in task.modes:
                started = time.perf_counter()
                if mode == "direct":
                    run = await run_direct(entry, target, client, max_tokens=task.max_tokens)
                else:
                    run, horizon = await run_engine(entry, target, client, ledgers / entry.id, window=window,
                                                    horizon=model.horizon, max_tokens=task.max_tokens)
                rows.append(_row(unit, run_id, len(rows), node, run, window,
                                 (time.perf_counter() - started) * 1000))
    for row in rows:  # the horizon the engine planned against, for every row (direct's count is against it)
        row["horizon"] = horizon or window
    return rows


def _row(unit: UnitKey, run_id: str, n: int, node: str, run: EntryRun, window: int, wall: float) -> dict[str, Any]:
    return make_row(unit, "bfcl", run_id, n, passed=run.verdict.valid, reason=run.verdict.error_type, node=node,
                    window=window, request_tokens=run.max_request, wall_ms=wall,
                    cache_tokens=sum(s.cached_tokens for s in run.sent),
                    detail={"entry": run.entry_id, "mode": run.mode, "refused_calls": run.refused_calls,
                            "seconds": round(run.seconds, 3),
                            "sent": [[s.status, s.prompt_tokens, s.cached_tokens, s.over_length] for s in run.sent]})


def runs_of(rows: list[dict[str, Any]]) -> Run:
    """One unit group's rows (``kind == "bfcl"``) as the runs the bench figures are computed from."""
    out = []
    for r in rows:
        d = json.loads(r["detail"] or "{}")
        run = EntryRun(d["entry"], r["session"], d["mode"], refused_calls=int(d.get("refused_calls", 0)),
                       seconds=float(d.get("seconds", 0.0)),
                       sent=[Sent(int(a), int(b), int(c), bool(o)) for a, b, c, o in d.get("sent", [])])
        run.verdict = Verdict(bool(r["passed"]), r["reason"])
        out.append(run)
    return Run(out, max((int(r["horizon"] or 0) for r in rows), default=0) or 1)
