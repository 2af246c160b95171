"""docs/ARCHITECTURE.md stays exactly true where it can be checked (issue 22 item 7): every path it cites
exists, every ``path:name`` names something defined there, and every dotted ``vak_context`` name imports."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ARCHITECTURE.md"
# Code spans and the diagram's words: anything that looks like a repository path, a path:name, or a
# dotted name in the namespace.
PATH = re.compile(r"(?<![\w./-])((?:[a-z_.][\w.-]*/)+[\w.*-]*|[\w-]+\.(?:py|md|toml|yaml|json|ipynb))(?::([\w.]+))?")
DOTTED = re.compile(r"(?<![\w.])(vak_context(?:\.\w+)+)")


def _cited() -> tuple[list[tuple[str, str | None]], list[str]]:
    text = DOC.read_text(encoding="utf-8")
    paths = [(m.group(1), m.group(2)) for m in PATH.finditer(text)]
    return paths, DOTTED.findall(text)


def _defined(path: Path) -> set[str]:
    """Top-level names of a module, and ``Class.member`` for each class's members."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        names.add(f"{node.name}.{item.name}")
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(f"{node.name}.{item.target.id}")
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _exists(cited: str) -> bool:
    if "*" in cited:
        return any(REPO.glob(cited))
    for base in (REPO, REPO / "docs"):
        if (base / cited).exists():
            return True
    return False


def test_every_path_and_name_the_architecture_page_cites_exists() -> None:
    paths, _ = _cited()
    assert len(paths) > 40  # the page cites the tree
    missing = [p for p, _ in paths if not _exists(p)]
    assert missing == []
    undefined = [f"{p}:{name}" for p, name in paths if name and name not in _defined(REPO / p)]
    assert undefined == []


def test_every_dotted_name_the_architecture_page_cites_imports() -> None:
    _, dotted = _cited()
    bad = []
    for name in dotted:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj: object = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                bad.append(name)
            break
        else:
            bad.append(name)
    assert bad == []


def test_the_check_catches_a_wrong_path_and_a_wrong_name(tmp_path: Path) -> None:
    """The resolver itself: a made-up path fails, a real ``path:name`` resolves, a made-up name does not."""
    assert _exists("storage/ledger.py") and not _exists("storage/nonesuch.py")
    assert "LedgerStore" in _defined(REPO / "storage" / "ledger.py")
    assert "nonesuch" not in _defined(REPO / "storage" / "ledger.py")
    found = [(m.group(1), m.group(2)) for m in PATH.finditer("see `agent/loop.py:TurnLoop.run` and docs/TURNS.md")]
    assert found == [("agent/loop.py", "TurnLoop.run"), ("docs/TURNS.md", None)]
