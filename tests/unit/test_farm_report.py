"""`vak farm report RUN` (vak_context.farm.report): a run's table as report.md and PNGs, from a hand-made table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from vak_context import extras
from vak_context.cli.main import main
from vak_context.errors import MissingExtra
from vak_context.farm.report import HORIZON_PNG, write_report
from vak_context.farm.rows import UnitKey, failed_unit_table, make_row, rows_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(run_dir: Path) -> None:
    rows = []
    for model, horizon in (("a", 1500), ("b", 3000)):
        for n, (tokens, followed) in enumerate(((1000, 1), (2000, 1 if model == "b" else 0), (4000, 0))):
            rows.append(make_row(UnitKey("ladder", model), "probe", "r1", n, passed=bool(followed), horizon=horizon,
                                 window=4096, request_tokens=tokens, detail={"followed": followed, "asked": 1}))
        for n in range(3):
            rows.append(make_row(UnitKey("replay", model, "s1"), "replay", "r1", n, passed=n != 2 or model == "b",
                                 reason="over budget: 5000 tokens > 4000" if n == 2 and model == "a" else "",
                                 request_tokens=1000 * (n + 1), budget=4000 if model == "a" else 8000,
                                 full_turns=2, card_turns=n, packet_turns=0, reset_turns=0, verbatim_results=3,
                                 digested_results=n + 1, packet_first=1 if n == 2 else None,
                                 packet_last=4 if n == 2 else None, node="n1"))
    for n in range(3):
        rows.append(make_row(UnitKey("card", "a", "s1"), "live", "r1", n, passed=n > 0, node="n2"))
    table = rows_table(rows)
    failed = failed_unit_table(UnitKey("ladder", "c"), "probe", "r1", "ModelServerError: model 'c' cannot be served")
    run_dir.mkdir(parents=True)
    pq.write_table(rows_table(table.to_pylist() + failed.to_pylist()), run_dir / "results.parquet")
    (run_dir / "spec.json").write_text(json.dumps({"spec": {"tasks": [
        {"name": "card", "kind": "live", "repeats": 3, "require": 2, "expect": "card"}]}}), encoding="utf-8")


def test_the_report_shows_each_task_kind_and_draws_the_plots(tmp_path: Path) -> None:
    """report.md carries the probe horizons, the replay figures (largest request over budget, fidelity sums,
    packet range, failure reasons), the live verdict against `require`, and the unit that could not run;
    the horizon curves and the session's side-by-side plot are real PNG files it links."""
    run = tmp_path / "r1"
    make_run(run)
    paths = write_report(run)
    text = paths[0].read_text(encoding="utf-8")
    assert "| ladder | a | 1,500 | 4,096 | 1/3 | 4,000 |" in text
    assert "| ladder | b | 3,000 | 4,096 | 2/3 | 4,000 |" in text
    assert "| a | s1 | 3 | 1 | 3,000 / 4,000 | 6 / 3 / 0 / 0 | 9 / 0 / 6 / 0 / 0 / 0 | 1–4 | over budget ×1 |" in text
    assert "| b | s1 | 3 | 0 |" in text
    assert "| card | a | s1 | card | 2/3 | 2 of 3 per directive | PASS (1/1 directives) |" in text
    assert "| ladder | c | - | ModelServerError: model 'c' cannot be served |" in text
    assert [p.name for p in paths[1:]] == [HORIZON_PNG, "session_s1.png"]
    for p in paths[1:]:
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5_000
        assert f"]({p.name})" in text


def test_vak_farm_report_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak farm report RUN` prints what it wrote and exits 0; a folder with no table exits 1 saying what to do."""
    run = tmp_path / "r1"
    make_run(run)
    assert main(["farm", "report", str(run)]) == 0
    out = capsys.readouterr().out.split()
    assert out[0].endswith("report.md") and len(out) == 3
    assert main(["farm", "report", str(tmp_path / "nothing")]) == 1
    assert "no results.parquet" in capsys.readouterr().err


def test_without_plots_the_farm_report_is_written_and_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the `plots` extra report.md is still written, saying in one line what to install."""
    monkeypatch.setitem(extras.EXTRAS, "plots", ("vak_no_such_module",))
    run = tmp_path / "r1"
    make_run(run)
    paths = write_report(run)
    assert [p.name for p in paths] == ["report.md"] and not list(run.glob("*.png"))
    text = paths[0].read_text(encoding="utf-8")
    assert "| ladder | a | 1,500 | 4,096 | 1/3 | 4,000 |" in text
    assert "No PNGs: drawing them needs the `plots` extra" in text and "vak-context[plots]" in text
    with pytest.raises(MissingExtra, match=r"vak-context\[plots\]"):
        extras.pyplot("a plot")
