"""One import namespace (issue 22 item 2): everything installs under ``vak_context``; nothing in the
repository imports a folder by its bare name; the installed package lists every package folder; and an
application with its own ``agent/``, ``context/``, ``events/`` and ``providers/`` packages runs a session
beside the engine with neither shadowing the other."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NS = "vak_context"
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
# Every folder the mapping names, by its bare name, plus `vak` (another distribution's import name).
BARE = {folder for folder in PACKAGE_DIR.values()} | {"vak"}
SCANNED = ("vak", "events", "storage", "actors", "context", "providers", "agent", "sessions", "importers",
           "engine", "adapters", "farm", "serve", "cli", "tests", "bench", "examples", "notebooks")


def _sources() -> list[tuple[str, str]]:
    """(where, python source) for every .py file and every notebook code cell the guard reads."""
    out = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")) if (REPO / top).is_dir() else ():
            out.append((str(path.relative_to(REPO)), path.read_text(encoding="utf-8")))
        for path in sorted((REPO / top).rglob("*.ipynb")) if (REPO / top).is_dir() else ():
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            for i, cell in enumerate(cells):
                if cell["cell_type"] == "code":
                    source = "".join(cell["source"])
                    # IPython magics are not Python; the guard reads the Python lines.
                    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
                    out.append((f"{path.relative_to(REPO)}[cell {i}]", "\n".join(lines)))
    return out


def _bare_imports(source: str) -> list[str]:
    """The bare project names a source imports: ``import events``, ``from farm.x import y``, and
    ``importlib.import_module("context.x")`` / ``python -m agent.x`` written as string literals."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in {
                "import_module", "find_spec"} and node.args and isinstance(node.args[0], ast.Constant):
            names = [str(node.args[0].value)]
        elif isinstance(node, ast.List | ast.Tuple):
            items = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            names = [items[i + 1] for i in range(len(items) - 1) if items[i] == "-m"]
        found += [n for n in names if n.split(".")[0] in BARE]
    return found


def test_nothing_imports_a_folder_by_its_bare_name() -> None:
    """No module, test, bench, example or notebook imports ``events``, ``storage``, ``actors``, ``context``,
    ``providers``, ``agent``, ``farm`` (or any mapped folder, or ``vak``) outside the namespace."""
    sources = _sources()
    assert len(sources) > 300  # the walk saw the tree
    bad = [f"{where}: {name}" for where, source in sources for name in _bare_imports(source)]
    assert bad == []


def test_the_guard_sees_every_form_it_forbids() -> None:
    """Each forbidden form is caught; the namespace's own names and unrelated packages are not."""
    source = textwrap.dedent("""
        import events
        from farm.jobs import x
        import vak.errors
        importlib.import_module("context.history")
        subprocess.run([sys.executable, "-m", "agent.grep_search"])
        import vak_context.events
        from vak_context.farm import jobs
        import eventsourcing
        subprocess.run(["python", "-m", "vak_context.cli.main"])
    """)
    assert _bare_imports(source) == ["events", "farm.jobs", "vak.errors", "context.history", "agent.grep_search"]


def test_every_package_folder_is_installed_and_mapped_once() -> None:
    """pyproject's ``packages`` lists exactly the folders holding an ``__init__.py`` below each mapped
    folder (a missing one would be left out of the wheel), and no folder is mapped twice."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    expected = set()
    for package, folder in PACKAGE_DIR.items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            expected.add(".".join((package, *parts)))
    assert set(config["packages"]) == expected
    assert len(set(PACKAGE_DIR.values())) == len(PACKAGE_DIR)
    assert all(name == NS or name.startswith(NS + ".") for name in config["packages"])
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["vak"].startswith(NS + ".cli.")


def test_the_install_exposes_no_bare_name() -> None:
    """Outside the checkout, the installed project answers to ``vak_context`` alone: ``import events`` (or
    ``agent``, ``farm``...) finds nothing of ours, so no module is importable under two names."""
    probe = textwrap.dedent(f"""
        import importlib.util, json
        import vak_context.events.envelope
        found = {{}}
        for name in {sorted(BARE)!r}:
            spec = importlib.util.find_spec(name)
            found[name] = spec.origin if spec else None
        print(json.dumps(found))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env,
                         cwd="/").stdout
    ours = {name: origin for name, origin in json.loads(out).items()
            if origin and Path(origin).resolve().is_relative_to(REPO)}
    assert ours == {}


APP_SCRIPT = '''
import json, asyncio, sys
from pathlib import Path
import httpx

# The application's own packages, named like the engine's folders.
import agent, context, events, providers
from agent.tools import answer
from events.bus import Bus

# The engine, beside them.
import vak_context
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.workspace import TOOLS, Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


def completion(text="", calls=()):
    message = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function",
                                  "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)]
    return {"id": "x", "object": "chat.completion", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}}


replies = [completion(calls=[("read_file", {"path": "notes.txt"})]), completion(answer())]


def handle(request):
    return httpx.Response(200, json=replies.pop(0))


async def main(root):
    (root / "ws").mkdir()
    (root / "ws" / "notes.txt").write_text("alpha\\nbeta\\n")
    surface = Surface.build([ToolDecl(RECALL_TOOL, always_loaded=True)]
                            + [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in TOOLS])
    profile = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(16_000, 0.9, 0.0),
                              Ewma(0.25, 3), 256)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=4, max_tokens=64)
    with LedgerStore(root / "ledger") as store:
        report = await TurnLoop(InProcessServices(store, "app"), provider, profile, config,
                                workspace=Workspace(root / "ws")).run("What do the notes say?")
        kinds = [e.kind for e in store.entries("app")]
    print(json.dumps({"answer": report.answer, "outcome": report.outcome, "kinds": kinds,
                      "app": [agent.__file__, context.__file__, events.__file__, providers.__file__, Bus.name],
                      "engine": vak_context.__file__}))


asyncio.run(main(Path(sys.argv[1])))
'''


def test_an_app_with_its_own_agent_context_events_and_providers_runs_a_session(tmp_path: Path) -> None:
    """From a folder holding its own ``agent/``, ``context/``, ``events/`` and ``providers/`` packages, a
    script imports those and the engine and runs a turn (a scripted model, a workspace tool, the ledger):
    the app's names are the app's, the engine's are the engine's."""
    app = tmp_path / "app"
    for package in ("agent", "context", "events", "providers"):
        (app / package).mkdir(parents=True)
        (app / package / "__init__.py").write_text(f"WHO = 'app {package}'\n")
    (app / "agent" / "tools.py").write_text("def answer():\n    return 'The notes say alpha and beta.'\n")
    (app / "events" / "bus.py").write_text("class Bus:\n    name = 'app bus'\n")
    (app / "main.py").write_text(APP_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "main.py", str(tmp_path)], cwd=app, capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["outcome"] == "completed" and out["answer"] == "The notes say alpha and beta."
    assert {"directive", "tool_result", "receipt", "turn_card"} <= set(out["kinds"])
    assert all(Path(f).resolve().is_relative_to(app.resolve()) for f in out["app"][:4]) and out["app"][4] == "app bus"
    assert Path(out["engine"]).resolve().is_relative_to(REPO)
