"""The planner's golden plans (the corpus and its digests: tests/fakes/golden_plans.py) must be the
committed ``tests/unit/planner_golden.json`` byte for byte. Regenerate (only from code whose plans are
known good): ``.venv/bin/python -m tests.unit.test_planner_golden``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.golden_plans import GOLDEN, REQUIRED, corpus_digests


def test_every_bench_and_recorded_plan_is_byte_for_byte_the_golden(trajectories: Path) -> None:
    """Re-planning the corpus gives every plan's digest exactly as committed (same count, same order),
    and the corpus still exercises every fidelity, packet level, rescue and current-turn compaction."""
    golden = json.loads(GOLDEN.read_text())
    digests, seen = corpus_digests()
    assert sorted(digests) == sorted(golden["plans"])
    for key, expected in golden["plans"].items():
        got = digests[key]
        first = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
        assert (len(got), first) == (len(expected), None), f"{key}: request #{first} differs"
    assert [k for k in REQUIRED if not seen[k]] == []


if __name__ == "__main__":
    found, exercised = corpus_digests()
    total = sum(map(len, found.values()))
    GOLDEN.write_text(json.dumps({"plans": found, "total": total}, indent=0, sort_keys=True) + "\n")
    print(f"{total} plans in {len(found)} (session, profile) runs written to {GOLDEN}")
    print(dict(sorted(exercised.items())))
