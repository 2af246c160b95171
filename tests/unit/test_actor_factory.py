"""Only actors/factory.py applies ``ray.remote``, and no actor module it reaches imports it back."""

from __future__ import annotations

import ast
from pathlib import Path


def _actor_imports(path: Path) -> set[str]:
    """The vak_context.actors.* modules a file imports, anywhere in it (function-local imports included)."""
    tree = ast.parse(path.read_text())
    names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return {n for n in names if n.startswith("vak_context.actors.")}


def test_only_the_factory_applies_ray_remote_and_nothing_it_imports_imports_it_back() -> None:
    """``ray.remote`` is called in actors/factory.py alone, in every package of the project (the farm's
    tasks and actors included), and no actor module the factory reaches (directly or through others)
    imports the factory: no cycle, hidden by a local import or not."""
    repo = Path(__file__).resolve().parents[2]
    actors = repo / "actors"
    packages = ("actors", "agent", "context", "events", "farm", "providers", "storage", "vak", "sessions",
                "importers", "engine", "cli")
    for path in sorted(p for package in packages for p in (repo / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        applies = any(isinstance(n, ast.Attribute) and n.attr == "remote" and isinstance(n.value, ast.Name)
                      and n.value.id == "ray" for n in ast.walk(tree))
        assert applies == (path == actors / "factory.py"), path
    reached: set[str] = set()
    todo = list(_actor_imports(actors / "factory.py"))
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            rel = module.removeprefix("vak_context.actors.").replace(".", "/")  # a module in a subpackage too
            todo += _actor_imports(actors / (rel + ".py"))
    assert {"vak_context.actors.probe", "vak_context.actors.evidence", "vak_context.actors.ledger.actor"} <= reached
    assert "vak_context.actors.factory" not in reached
