"""The package layering holds (issue 13 item 7): vak_context's own modules -> events -> context -> storage / providers -> agent ->
actors -> farm, nothing imports a layer above its own (function-local imports included), storage and
providers do not import each other, and no group of modules imports itself round in a cycle."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NS = "vak_context"
# The base layer is the namespace's own modules (errors, names, config): layer "" below.
LAYERS = ("", "events", "context", "storage", "providers", "agent", "actors", "sessions", "importers", "engine", "adapters",
          "farm", "serve", "cli")  # adapters: the framework adapters, on the public API (engine) only
SIDE_BY_SIDE = ({"storage", "providers"}, {"sessions", "importers"})  # one layer each: neither imports the other


def _package_dirs() -> dict[str, Path]:
    """Installed package -> its folder, as pyproject's setuptools package-dir maps them."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: REPO / folder for name, folder in config["package-dir"].items()}


def _modules() -> dict[str, Path]:
    """Installed module name -> file, for every module of the namespace."""
    out = {}
    for package, folder in _package_dirs().items():
        for path in folder.rglob("*.py"):
            name = ".".join((package, *path.relative_to(folder).with_suffix("").parts))
            out.setdefault(name.removesuffix(".__init__"), path)
    return out


def _layer(module: str) -> str:
    """``vak_context.agent.loop`` -> ``agent``; the namespace's own modules -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in it (``from a import b`` names ``a.b`` when that
    is a module, else ``a``)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def _cycles(graph: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_a_layer_above_its_own_and_no_cycles() -> None:
    """Every import edge goes down or sideways within a layer; storage and providers never import each
    other; the module graph has no cycle."""
    mods = _modules()
    graph = _graph(mods)
    rank = {p: i for i, p in enumerate(LAYERS)}
    upward = []
    for name, targets in graph.items():
        for target in targets:
            a, b = _layer(name), _layer(target)
            side = {a, b} in SIDE_BY_SIDE
            if (rank[b] > rank[a] and not side) or (a != b and side):
                upward.append(f"{name} -> {target}")
    assert upward == []
    assert _cycles(graph, sorted(mods)) == []
    assert len(mods) > 100 and graph["vak_context.agent.loop"]  # the walk saw the tree


def test_the_check_finds_a_cycle_and_an_upward_import() -> None:
    """The cycle finder and the layer rule see what they are for, on a small graph."""
    graph: dict[str, set[str]] = defaultdict(set, {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b.q": set()})
    assert _cycles(graph, ["a.x", "a.y", "a.z", "b.q"]) == [["a.x", "a.y", "a.z"]]


def _doc_layer_table() -> list[tuple[list[str], list[str]]]:
    """docs/ARCHITECTURE.md's layer table, bottom to top: each row's folders (as layer names: ``vak/`` is the
    base layer ``""``) and the names they are installed as."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("| layer | folder | installed as | what it holds |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.strip().splitlines()[1:]:  # past the header's rule
        cells = [c.strip() for c in line.strip("|").split("|")]
        folders = [f.rstrip("/") for f in re.findall(r"`([^`]+)`", cells[1])]
        rows.append(([("" if f == "vak" else f) for f in folders], re.findall(r"`([^`]+)`", cells[2])))
    return rows


def test_the_architecture_pages_layer_table_is_the_layering_this_test_enforces() -> None:
    """The page's table lists the layers in LAYERS' order, the side-by-side pairs as one row each, and each
    folder installed as pyproject maps it: the page cannot drift from the rule the test above checks."""
    expected: list[list[str]] = []
    for layer in LAYERS:
        pair = next((p for p in SIDE_BY_SIDE if layer in p), None)
        if pair is not None and expected and set(expected[-1]) <= pair and expected[-1][0] in pair:
            expected[-1].append(layer)
        else:
            expected.append([layer])
    rows = _doc_layer_table()
    assert [folders for folders, _ in rows] == expected
    installed = {str(folder.relative_to(REPO)): name for name, folder in _package_dirs().items()}
    assert [names for _, names in rows] == [[installed["vak" if f == "" else f] for f in folders]
                                           for folders, _ in rows]
