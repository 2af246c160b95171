"""No test module imports another: what tests share lives in tests/fakes/ or in a conftest fixture.

A helper imported from a test module runs that module's collection-time code (its imports, its
markers) wherever it is used, ties one test file's private names to another's, and breaks when the
file moves to another tier. The walk reads every module under tests/ and bench/ with ``ast``, so a
function-local import counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WALKED = ("tests", "bench")


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(path: Path) -> list[str]:
    """Each import in ``path`` of a ``test_*`` module, as ``line: statement``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                found.append(f"{node.lineno}: from {module} import ...")
            # ``from tests import test_x`` / ``from . import test_x``: the module is among the names
            found += [f"{node.lineno}: from {module} import {a.name}" for a in node.names if _is_test_module(a.name)]
    return found


def test_no_module_under_tests_or_bench_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for folder in WALKED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (hits := imports_of_test_modules(path))
    }
    assert offenders == {}, (
        "test modules are imported (move the shared helper into tests/fakes/ or a conftest fixture): "
        + "; ".join(f"{p} line {h}" for p, hits in offenders.items() for h in hits)
    )


def test_the_walk_finds_each_form_of_a_test_module_import(tmp_path: Path) -> None:
    """The check itself: absolute, relative, package-member and function-local imports are all caught;
    helpers and ordinary modules are not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tests.test_planner\n"
        "from tests.test_turn_loop import Scripted\n"
        "from .test_turns import Chain\n"
        "from tests import test_loopback, fakes\n"
        "from . import test_events\n"
        "def f():\n"
        "    from test_evidence_shapes import READERS\n"
        "from tests.fakes.threshold import ThresholdModel\n"
        "import pytest\n"
    )
    assert imports_of_test_modules(sample) == [
        "1: import tests.test_planner",
        "2: from tests.test_turn_loop import ...",
        "3: from .test_turns import ...",
        "4: from tests import test_loopback",
        "5: from . import test_events",
        "7: from test_evidence_shapes import ...",
    ]
