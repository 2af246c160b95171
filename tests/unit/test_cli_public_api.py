"""The CLI is the first user of the public API: `vak chat`, `vak turn`, `vak run`'s live turns and the farm's
live units build their sessions (the session, tool and model wiring) with ``vak_context``'s public names
only. An AST check of their imports: none of the internal wiring (``engine.live`` is gone; the turn loop, the
services, the binding), and the Engine from the package itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Internal wiring a CLI session must not reach for: the old LiveSession, the turn loop, the loop's services
# in-process and on Ray, the API's own binding.
FORBIDDEN = ("vak_context.engine.live", "vak_context.agent.loop", "vak_context.actors.local_services",
             "vak_context.actors.turn_services", "vak_context.engine.binding", "vak_context.engine.api")


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, names) of every import under ``tree``, module-level and inside functions."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


def _function(tree: ast.Module, name: str) -> ast.AST:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _forbidden(imports: list[tuple[str, list[str]]]) -> list[str]:
    return [m for m, _ in imports if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
            or (m.startswith("vak_context.actors.") and m.endswith("services"))]


@pytest.mark.parametrize("module", ["cli/chat.py", "farm/model_units.py"])
def test_cli_sessions_are_built_from_public_names_only(module: str) -> None:
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    imports = _imports(tree)
    assert _forbidden(imports) == []
    assert any(m == "vak_context" and "Engine" in names for m, names in imports), "no Engine from vak_context"
    assert not (REPO / "engine" / "live.py").exists(), "engine/live.py (LiveSession) is back: one wiring, the API's"


def test_the_main_jobs_live_turns_use_public_names_only() -> None:
    """``run_live_turns`` imports the public package and the CLI's own printing, nothing else."""
    tree = ast.parse((REPO / "cli" / "mainjob.py").read_text(encoding="utf-8"))
    imports = _imports(_function(tree, "run_live_turns"))
    assert ("vak_context", ["Engine"]) in imports
    assert [m for m, _ in imports if m not in ("asyncio", "vak_context") and not m.startswith("vak_context.cli.")] == []
    assert _forbidden(_imports(tree)) == []


def test_the_check_sees_a_forbidden_import() -> None:
    """The check itself: each kind of internal wiring import is caught, inside a function too."""
    source = ("from vak_context.engine.live import LiveSession\n"
              "def f():\n    from vak_context.actors.turn_services import RayServices\n"
              "    import vak_context.agent.loop\n    from vak_context.actors.new_services import X\n")
    assert len(_forbidden(_imports(ast.parse(source)))) == 4
