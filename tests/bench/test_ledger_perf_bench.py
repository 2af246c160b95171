"""The ledger bench's sync-latency shim: built with the C compiler, it delays every fsync it sees."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ledger_append_bench", ROOT / "bench" / "ledger_append.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shim_adds_its_latency_to_every_fsync(tmp_path: Path) -> None:
    """A process started with the shim and 50 ms configured never sees an fsync return sooner than
    50 ms (far above any real sync; the shim sleeps at least that long before the real call); the file is still synced."""
    bench = _bench()
    lib = bench.build_shim(tmp_path)
    if lib is None:
        pytest.skip("no C compiler here: the bench skips its latency table too")
    probe = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); import importlib.util as u; "
             f"s = u.spec_from_file_location('b', {str(ROOT / 'bench' / 'ledger_append.py')!r}); "
             "m = u.module_from_spec(s); s.loader.exec_module(m); from pathlib import Path; "
             f"print(json.dumps(m.time_fsync(Path({str(tmp_path)!r}), rounds=5)))")
    env = {"LD_PRELOAD": str(lib), bench.LATENCY_ENV: "50000", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                          timeout=120)
    median_us, p90_us = json.loads(done.stdout.strip().splitlines()[-1])
    assert median_us >= 50_000 and p90_us >= 50_000
