"""`vak search`, `vak reindex` and `vak verify` on the search index, each in a real process (docs/SEARCH.md)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.cli import run_vak
from vak_context.events.payloads import Directive, EvidenceBody
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import SEARCH_DIR, STATE_FILE

BODY = "".join(f"row {i} filler words here\n" for i in range(120)).replace("row 70 ", "row 70 quokka ")


def _ledger(root: Path) -> str:
    with LedgerStore(root, search=True) as store:
        store.append("s", [Directive(text="read the big file")])
        meta = EvidenceBody(tool_use_id="t1", tool_name="read_file", chars=len(BODY), bytes=len(BODY))
        return store.append("s", [meta], blobs=[BODY.encode()])[0]


def test_search_help_search_reindex_and_verify(tmp_path: Path) -> None:
    root = tmp_path / "l"
    eid = _ledger(root)
    done = run_vak("search", "--help")
    assert done.returncode == 0 and "--session" in done.stdout

    done = run_vak("search", str(root), "quokka")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("s  turn 1  lines ") and eid[:12] in lines[0] and "(read_file)" in lines[0]
    assert "quokka" in lines[1]
    assert lines[2].strip().startswith(f'recall({{"id": "{eid[:12]}", "range": [')

    done = run_vak("search", str(root), "quokka", "--session", "s", "--json")
    [hit] = [json.loads(x) for x in done.stdout.splitlines()]
    assert hit["id"] == eid and hit["lines"][0] <= 71 <= hit["lines"][1] and hit["turn"] == 1

    done = run_vak("search", str(root), "nothing_like_this")
    assert done.returncode == 1 and "no match" in done.stdout and 'recall({"turn": N})' in done.stdout

    assert run_vak("verify", str(root)).stdout.count("search index") == 0
    state = root / "sessions" / "s" / SEARCH_DIR / STATE_FILE
    tampered = json.loads(state.read_text())
    tampered["docs"] += 5
    state.write_text(json.dumps(tampered))
    done = run_vak("verify", str(root))
    assert done.returncode == 0 and "search index: session 's': the search index disagrees" in done.stdout
    assert "vak reindex" in done.stdout
    done = run_vak("search", str(root), "quokka")  # still found, from the ledger, with a note
    assert done.returncode == 0 and done.stdout.startswith("note: ") and "quokka" in done.stdout

    done = run_vak("reindex", str(root))
    assert done.returncode == 0 and done.stdout.startswith("s: ") and "documents from 2 entries" in done.stdout
    assert "search index" not in run_vak("verify", str(root)).stdout
    done = run_vak("search", str(root), "quokka")
    assert done.returncode == 0 and not done.stdout.startswith("note:")
