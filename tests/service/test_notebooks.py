"""Every notebook in notebooks/ runs top to bottom (executed with nbclient)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

# farm.ipynb and live.ipynb need a farm run and a running cluster: tests/ray/test_notebooks_farm.py runs them.
FARM_NOTEBOOKS = {"farm.ipynb", "live.ipynb"}
NOTEBOOKS = sorted(p for p in (Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")
                   if p.name not in FARM_NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    with LedgerStore(ledger) as store:
        gen = generate_session(seed=5, turns=7, append=lambda p, b: store.append_one("nb", p, blob=b))
    monkeypatch.setenv("VAK_LEDGER", str(ledger))
    monkeypatch.setenv("PYTHONPATH", str(path.parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    if path.name == "ledger.ipynb":
        assert "directive" in outputs and "seq" in outputs
        assert (tmp_path / "ledger-bytes-by-kind.png").stat().st_size > 1000
        assert sum(1 for _ in gen.ids) > 0
