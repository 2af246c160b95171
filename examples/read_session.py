"""What a session did, read back from its ledger folder with plain pyarrow and DuckDB (as from Jupyter):
the entries by kind, each directive, and each turn's card outcome.

    python examples/read_session.py ledger demo        # needs duckdb (pip install duckdb; the test extra has it)

A ledger is a folder of Arrow IPC files (docs/LEDGER_FORMAT.md); sealed segments are plain Arrow, so no
project code is needed to read them. A writer that is still open keeps its newest entries in the tail until
it closes.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.dataset as ds


def read(folder: str, session: str) -> dict[str, object]:
    entries = ds.dataset(Path(folder) / "sessions" / session, format="arrow").to_table(
        columns=["seq", "kind", "payload"])
    rows = sorted(entries.to_pylist(), key=lambda r: r["seq"])
    kinds = Counter(r["kind"] for r in rows)
    directives = [json.loads(r["payload"])["text"] for r in rows if r["kind"] == "directive"]
    outcomes = [json.loads(r["payload"])["outcome"] for r in rows if r["kind"] == "turn_card"]
    # The same question in SQL, over the same Arrow table.
    asked = duckdb.sql("select json_extract_string(payload, '$.text') as text from entries "
                       "where kind = 'directive' order by seq").fetchall()
    assert [a for (a,) in asked] == directives
    return {"entries": len(rows), "kinds": dict(kinds), "directives": directives, "outcomes": outcomes}


if __name__ == "__main__":
    summary = read(sys.argv[1] if len(sys.argv) > 1 else "ledger", sys.argv[2] if len(sys.argv) > 2 else "demo")
    print(f"{summary['entries']} entries: {summary['kinds']}")
    for directive, outcome in zip(summary["directives"], summary["outcomes"], strict=False):
        print(f"[{outcome}] {directive}")
