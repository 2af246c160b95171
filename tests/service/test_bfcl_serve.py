"""BFCL multi-turn through ``vak serve``: the direct client (BFCL's FC handler's shape) pointed at the server,
each entry its own session by header, in front of the perfect scripted model on loopback. Every entry still
passes BFCL's checker; the server defers the entry's 28-odd functions behind find_tools (a small window),
so its requests are smaller than direct's."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fakes.bfcl_model import PerfectModel
from tests.fakes.httpserver import serve
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.farm.bfcl.modes import Target
from vak_context.farm.bfcl.multiturn import CATEGORIES, load_entries
from vak_context.farm.bfcl.report import figures, run_categories, table


async def test_both_categories_pass_through_vak_serve_with_smaller_requests(tmp_path: Path) -> None:
    model = PerfectModel([e for c in CATEGORIES for e in load_entries(c, 1)])
    with serve(model.handle) as upstream, running(tmp_path / "ledger", "openai-compat:perfect", upstream.base_url,
                                                    window=16_384) as server:
        via = Target(server.base_url, "perfect", {"Authorization": f"Bearer {CLIENT_KEY}"})
        async with httpx.AsyncClient(timeout=120) as client:
            run = await run_categories(CATEGORIES, 1, Target(upstream.base_url, "perfect"), client,
                                       modes=("direct", "serve"), via=via)
    rows = {(f.category, f.mode): f for f in figures(run)}
    assert sorted(rows) == sorted((c, m) for c in CATEGORIES for m in ("direct", "serve"))
    for category in CATEGORIES:
        direct, served = rows[category, "direct"], rows[category, "serve"]
        assert (direct.passed, served.passed) == (1, 1), [r.verdict for r in run.runs]
        assert served.prompt_per_entry < direct.prompt_per_entry
    goals = [line for line in table(figures(run), run.horizon).splitlines() if line.startswith("goal ")]
    assert len(goals) == 5 and all(" serve " in g and ": met (" in g for g in goals), goals
