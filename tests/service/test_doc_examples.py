"""Docs that run (issue 33 item 7): every ```` ```python ```` block of README.md and docs/*.md runs as written,
unless the line right before its opening fence is ``<!-- excerpt -->`` (a fragment that cannot run alone).

The blocks run as programs, one after another in one child process (tests/fakes/doc_runner.py: the imports
are paid once), each block in a folder of its own as the working directory, under the loopback guard,
against the scripted model (tests/fakes/doc_model.py) on a loopback server, wired in the way the docs say a
program finds its model:
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (the OpenAI clients, and the examples that pass them on to vak),
``VAK_MODEL`` with ``OPENAI_COMPAT_BASE_URL`` (the engine's own examples), ``VAK_SERVE_URL`` and
``VAK_SERVE_KEY_FILE`` (a running ``vak serve`` in front of the same model, for docs/INTEGRATIONS.md), and
a ledger at ``vak-data/ledger`` as ``make demo`` leaves one (for the blocks that read a ledger). The proxy
variables point at a closed loopback port, so a client that went past the guard fails too. A block that
fails fails the test with its file and line and what it printed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.doc_model import DocModel
from tests.fakes.httpserver import serve
from vak_context.serve.child import serve_child

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXCERPT = "<!-- excerpt -->"
OPENING = re.compile(r"^(\s*)```python\s*$")
KEY = "sk-test-docs-0123456789abcdef"
CLOSED_PORT = "http://127.0.0.1:9"  # the proxies: nothing listens there
LEDGER_DOCS = {"README.md", "LEDGER_FORMAT.md", "TURNS.md"}  # their blocks read the ledger `make demo` writes
SERVE_DOCS = {"INTEGRATIONS.md"}  # its blocks talk to a running `vak serve`
TIMEOUT_S = 300  # every block, imports included, on a loaded 2-core machine


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # the opening fence's, from 1
    code: str
    excerpt: bool

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}" if self.doc.is_relative_to(REPO) else f"{self.doc}:{self.line}"


def blocks(doc: Path, text: str | None = None) -> list[Block]:
    """The ```` ```python ```` blocks of ``doc`` (or of ``text``, read as that doc), in order."""
    lines = (doc.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = OPENING.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, start = opening.group(1), i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i].removeprefix(indent))
            i += 1
        if i == len(lines):
            raise AssertionError(f"{doc}:{start + 1}: a ```python block that is never closed")
        excerpt = start > 0 and lines[start - 1].strip() == EXCERPT
        found.append(Block(doc, start + 1, "\n".join(body) + "\n", excerpt))
        i += 1
    return found


def runnable(doc: Path) -> list[Block]:
    return [b for b in blocks(doc) if not b.excerpt]


def test_blocks_are_found_and_the_marker_is_read() -> None:
    text = "\n".join(["# t", "```python", "print(1)", "```", "", EXCERPT, "```python", "x = y", "```",
                      "* a list:", "  ```python", "  print(2)", "  ```", "```sh", "ls", "```"])
    found = blocks(REPO / "t.md", text)
    assert [(b.line, b.code, b.excerpt) for b in found] == [
        (2, "print(1)\n", False), (7, "x = y\n", True), (11, "print(2)\n", False)]
    assert all(compile(b.code, b.where, "exec") for b in runnable(REPO / "README.md"))


async def demo_ledger(folder: Path) -> None:
    """A ledger at ``folder`` as `make demo` leaves one: a session with a turn that ran a tool."""

    def run_command(command: str) -> str:
        """Run a shell command; returns its output and exit code.

        Args:
            command: the command line
        """
        return f"{command.removeprefix('echo ')}\nexit code: 0"

    model = DocModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("demo", model="openai-compat:gpt-4o-mini", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=[run_command], window=8_000) as session:
                result = await session.run("run echo hello")
    assert result.outcome == "completed", result


@contextmanager
def vak_serve(base_url: str, ledger: Path) -> Iterator[dict[str, str]]:
    """`vak serve` as a user starts it, in front of the scripted model: what it printed, as the variables."""
    with serve_child("openai-compat:gpt-4o-mini", ledger=ledger, base_url=base_url, window=8_000,
                     start_timeout=120) as child:
        printed = re.search(r"key in (\S+);", "".join(child.output))
        assert printed is not None, child.output
        yield {"VAK_SERVE_URL": child.root, "VAK_SERVE_KEY_FILE": printed.group(1)}


def failures(stderr: str) -> dict[str, str]:
    """Each failed block's folder -> what the runner printed for it."""
    return {m.group(1): m.group(2) for m in re.finditer(r"BLOCK-FAILED (\S+)\n(.*?)BLOCK-END", stderr, flags=re.S)}


@pytest.mark.slow  # about 22 s of CPU; 55 s of wall time on the 2-core machine at a load of 6-7
async def test_the_python_blocks_of_the_docs_run(tmp_path: Path) -> None:
    todo = [b for doc in DOCS for b in runnable(doc)]
    assert todo, "no runnable ```python block found: the collector is broken"
    ledger = tmp_path / "demo-ledger"
    await demo_ledger(ledger)
    folders: dict[str, Block] = {}
    for block in todo:
        folder = tmp_path / f"{block.doc.stem}-{block.line}"
        folder.mkdir()
        if block.doc.name in LEDGER_DOCS:
            shutil.copytree(ledger, folder / "vak-data" / "ledger")
        (folder / "example.py").write_text(block.code, encoding="utf-8")
        folders[str(folder)] = block
    model = DocModel()
    with ExitStack() as stack:
        server = stack.enter_context(serve(model.handle))
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY,
               "OPENAI_COMPAT_BASE_URL": server.base_url, "VAK_MODEL": "openai-compat:gpt-4o-mini",
               "OPENAI_AGENTS_DISABLE_TRACING": "1",  # the Agents SDK would export its traces to OpenAI
               "HTTP_PROXY": CLOSED_PORT, "HTTPS_PROXY": CLOSED_PORT, "ALL_PROXY": CLOSED_PORT,
               "NO_PROXY": "127.0.0.1,localhost",
               "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)}
        if any(b.doc.name in SERVE_DOCS for b in todo):
            env.update(stack.enter_context(vak_serve(server.base_url, tmp_path / "serve-ledger")))
        try:
            done = subprocess.run([sys.executable, "-m", "tests.fakes.doc_runner", *folders], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"the docs' blocks did not finish in {TIMEOUT_S} s:\n{exc.stdout!r}\n{exc.stderr!r}") from None
    failed = failures(done.stderr)
    report = "\n\n".join(f"{folders[f].where}: this block failed:\n{why[-3000:]}" for f, why in failed.items())
    assert not failed, report
    assert done.returncode == 0, f"the runner exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.count("BLOCK-START") == len(todo), done.stdout
    # The examples print each turn's outcome in brackets: against the scripted model every turn completes.
    assert not re.search(r"\[(failed|cancelled|degraded)\]", done.stdout), done.stdout
    assert model.bodies, "no example reached the scripted model"
