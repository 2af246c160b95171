"""The README's main job, and the ledger CLI commands, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from farm.mainjob import run_main_job
from storage.ledger import LedgerStore
from storage.segments import list_segments, scan_segment

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.ray
@pytest.mark.live
def test_main_job_writes_verifies_and_summarises(ray_cluster: Any, local_model: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", local_model.api_key)  # as for `vak run --local-base-url`
    summary = run_main_job(tmp_path / "ledger", turns=6, seed=3, session="job", out=lines.append,
                           local_base_url=local_model.base_url)
    text = "\n".join(lines)
    assert summary["verify"]["ok"]
    assert summary["stats"]["by_kind"]["directive"] == 6
    assert summary["head"] in text and "entries by kind" in text and "turn_card" in text
    # the local model was measured, and the probe and its profile are in the ledger
    assert "capacity profile local:smollm2" in text and "instruction horizon" in text
    assert summary["stats"]["by_kind"]["capacity_profile"] == 2  # the measured one and the generator's
    # the session was read back (turns, cards, digests) and planned for two models side by side
    assert "── turn 6" in text and "[evidence:" in text
    assert "local (measured)" in text and "frontier (200k)" in text and "budget" in text
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:  # what the job wrote is on disk
        assert store.head("job") == summary["head"]
        assert store.count("job") == summary["written"]
        kinds = [e.kind for e in store.entries("job", 0, 2)]
        assert kinds == ["activity", "capacity_profile"]


def _vak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_cli_verify_and_inspect(tmp_path: Path) -> None:
    from farm.sessiongen import generate_session

    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        gen = generate_session(seed=2, turns=4, append=lambda p, b: store.append_one("cli", p, blob=b))
    ok = _vak("verify", str(root))
    assert ok.returncode == 0 and f"ok: {len(gen.ids)} entries" in ok.stdout
    inspect = _vak("inspect", str(root))
    assert inspect.returncode == 0 and '"directive": 4' in inspect.stdout
    # wreck one batch: verify fails, names the entry, and says what to do next
    ((number, seg, _),) = list_segments(root / "sessions" / "cli")
    batch = scan_segment(seg, number, True).batches[5]
    data = bytearray(seg.read_bytes())
    for pos in range(batch.offset + 100, batch.end - 16):
        data[pos] ^= 0xFF
    seg.write_bytes(bytes(data))
    bad = _vak("verify", str(root))
    assert bad.returncode == 1
    assert "FAILED: first bad entry: seq 5" in bad.stdout and "Keep a copy" in bad.stdout
    missing = _vak("verify", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "is not a ledger" in missing.stderr and "Traceback" not in missing.stderr
