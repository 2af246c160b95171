"""bench/bfcl_degrade.py end to end, as a user runs it: BFCL v4 multi-turn, 3 entries per category, against
the scripted model that degrades above T = 4,096 tokens (farm/bfcl/scripted.py). The engine learns T only
from its probe; through the engine (the caller's loop and vak serve) every entry passes BFCL's own checker,
direct none (its requests carry the entry's tool schemas, mostly over T on their own). No timing asserts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vak_context.farm.bfcl.multiturn import CATEGORIES

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_passes_what_direct_fails_past_the_models_horizon() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl_degrade.py"), "--entries", "3", "--threshold",
                           "4096"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    probe = re.search(r"T=4,096: probe horizon ([\d,]+) tokens, negative control (\w+)", out)
    assert probe is not None, out[-3000:]
    assert 3_500 < int(probe.group(1).replace(",", "")) <= 4_096 and probe.group(2) == "clean"
    # category, T, probe, mode, acc, %, perfect (on the same entries), tok/entry, mean, max, >T
    rows = {(r[0], r[3]): r for line in out.splitlines() if line.startswith("multi_turn_") and len(r := line.split()) >= 11}
    for category in CATEGORIES:
        assert rows[(category, "perfect")][4] == "3/3", rows[(category, "perfect")]
        for mode in ("engine", "serve"):
            assert rows[(category, mode)][4] == rows[(category, mode)][6] == "3/3", rows[(category, mode)]
            assert rows[(category, mode)][10] == "0", rows[(category, mode)]  # no request over T
        assert rows[(category, "direct")][4] == "0/3", rows[(category, "direct")]
        assert int(rows[(category, "direct")][10]) > 0
    goals = [line for line in out.splitlines() if line.startswith("goal ") and "perfect" in line]
    assert len(goals) == 4 and all(": met (3/3 vs 3/3)" in g for g in goals), goals
