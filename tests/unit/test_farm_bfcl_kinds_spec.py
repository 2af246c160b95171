"""The bfcl_history and bfcl_degrade task kinds in a farm spec: their defaults, their units, and bad values
refused with the line and key (the units themselves run in tests/service/test_farm_bfcl_kinds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context.errors import FarmSpecError
from vak_context.farm.run import plan_units
from vak_context.farm.spec import BfclDegradeTask, BfclHistoryTask, parse_farm_spec

BASE = """
[farm]
name = "t"

[[models]]
name = "small"
model = "qwen1.5b"
n_ctx = 8192

[[models]]
name = "hosted"
kind = "hosted"
spec = "anthropic:claude-sonnet-4-5"
window = 200000
"""


def test_defaults_and_units() -> None:
    spec = parse_farm_spec(BASE + '[[tasks]]\nname = "h"\nkind = "bfcl_history"\n'
                           '[[tasks]]\nname = "d"\nkind = "bfcl_degrade"\n')
    history, degrade = spec.tasks
    assert isinstance(history, BfclHistoryTask) and isinstance(degrade, BfclDegradeTask)
    assert history.categories == ("simple_python", "multiple", "parallel") and history.entries == 20
    assert history.sizes == (0, 2_000, 4_000, 6_000, 7_500) and history.modes == ("direct", "engine")
    assert history.history is None and history.window is None
    assert degrade.categories == ("multi_turn_base", "multi_turn_long_context") and degrade.entries == 200
    assert degrade.thresholds == (4_096, 8_192, 16_384) and degrade.perfect
    units, notes = plan_units(spec)
    assert [str(u.key) for u in units] == [
        "h/small/simple_python", "h/small/multiple", "h/small/parallel",
        *(f"d/{m}/{c}" for m in ("degrading-4096", "degrading-8192", "degrading-16384", "perfect")
          for c in ("multi_turn_base", "multi_turn_long_context"))]
    assert len(notes) == 1 and notes[0].startswith("h/hosted: BFCL speaks OpenAI chat completions")
    assert {u.model.horizon for u in units if u.key.task == "d"} == {4_096, 8_192, 16_384, None}


def test_sizes_thresholds_and_history_are_read(tmp_path: Path) -> None:
    (tmp_path / "rec.json").write_text("[]", encoding="utf-8")
    spec = parse_farm_spec(BASE + '[[tasks]]\nname = "h"\nkind = "bfcl_history"\nmodels = ["small"]\n'
                           'categories = ["parallel"]\nentries = 50\nsizes = [6000, 0]\nhistory = "rec.json"\n'
                           'window = 8192\n'
                           '[[tasks]]\nname = "d"\nkind = "bfcl_degrade"\nthresholds = [8192]\nperfect = false\n'
                           'modes = ["engine"]\n', base_dir=tmp_path)
    history, degrade = spec.tasks
    assert isinstance(history, BfclHistoryTask) and isinstance(degrade, BfclDegradeTask)
    assert (history.sizes, history.categories, history.entries, history.history, history.window) == (
        (0, 6_000), ("parallel",), 50, tmp_path / "rec.json", 8192)
    assert degrade.unit_models() == (("degrading-8192", 8192),) and degrade.modes == ("engine",)


@pytest.mark.parametrize(("task", "key", "words"), [
    ('kind = "bfcl_history"\nsizes = []\n', "tasks[0].sizes", "non-empty list"),
    ('kind = "bfcl_history"\nsizes = [0, 0]\n', "tasks[0].sizes", "distinct"),
    ('kind = "bfcl_history"\ncategories = ["multi_turn_base"]\n', "tasks[0].categories", "simple_python"),
    ('kind = "bfcl_history"\nhistory = "nope.json"\n', "tasks[0].history", "no recorded session file"),
    ('kind = "bfcl_degrade"\nthresholds = [10]\n', "tasks[0].thresholds", "at least 256"),
    ('kind = "bfcl_degrade"\nmodels = ["small"]\n', "tasks[0].models", "unknown key"),
])
def test_bad_values_name_the_key(tmp_path: Path, task: str, key: str, words: str) -> None:
    with pytest.raises(FarmSpecError) as info:
        parse_farm_spec(BASE + f'[[tasks]]\nname = "x"\n{task}', path=Path("farm.toml"), base_dir=tmp_path)
    assert info.value.key == key and words in str(info.value), str(info.value)
