"""Modules of a few hundred lines and functions a reader holds at once (issue 37 item 5): every module of the
namespace (the folders pyproject maps into ``vak_context``; tests, benches, notebooks and examples are not
among them) is under 500 lines, and every function or method in it under 60, its decorators, signature and
docstring included. Over a limit, split along a seam: a module per concept, a step per function."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500  # a module has fewer lines than this
MAX_FUNCTION_LINES = 60  # and so has each function
OUTSIDE = ("tests", "bench", "notebooks", "examples")


def _modules() -> list[Path]:
    """Every module of the installed namespace, as pyproject's setuptools package-dir maps its folders."""
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return sorted({p for folder in dirs.values() for p in (REPO / folder).rglob("*.py")
                   if not set(p.relative_to(REPO).parts) & set(OUTSIDE)})


def _long_functions(source: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of each function or method at or over the limit, nested ones included."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    lines = (child.end_lineno or child.lineno) - first + 1
                    if lines >= MAX_FUNCTION_LINES:
                        found.append((name, lines))
                name += "."
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_every_module_is_under_500_lines() -> None:
    modules = _modules()
    assert len(modules) > 200 and REPO / "engine" / "api.py" in modules  # the walk saw the tree
    over = {str(p.relative_to(REPO)): n for p in modules
            if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES}
    assert over == {}


def test_every_function_is_under_60_lines() -> None:
    over = {f"{p.relative_to(REPO)}:{name}": n for p in _modules()
            for name, n in _long_functions(p.read_text(encoding="utf-8"))}
    assert over == {}


def test_the_measure_counts_decorators_signature_and_body_of_nested_functions() -> None:
    """The measure itself, on a small source: a method of 59 lines with its decorator is at the limit, the
    same function undecorated is under it, and a function holding a nested one counts the nested lines."""
    body = "\n".join(f"        x{i} = {i}" for i in range(57))
    source = (f"class C:\n    @staticmethod\n    def m():\n{body}\n        return 0\n\n"
              f"def outer():\n    def inner():\n{body}\n        return 1\n    return inner\n\n"
              f"def plain():\n{body}\n        return 2\n")
    assert _long_functions(source) == [("C.m", 60), ("outer", 61)]  # inner and plain: 59 lines each
