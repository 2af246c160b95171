"""The text of generated sessions (``vak_context.sessions.generator``): real files, real tool output, quotes.

A generated session is about this repository. Its directives ask about files that exist (README.md,
pyproject.toml, the Makefile, docs/*.md); its tool results are what the tools return over those files:
``read_file`` and ``list_dir`` run through the engine's own workspace tools (``vak_context.agent.workspace``),
shell commands print what ``cat``, ``head``, ``grep -n`` and ``python -c`` print there, a docs search
ranks the files' sections with the project's BM25, two test runs are recordings of real runs, and the
failing calls fail as those tools fail. Answers quote those results.

The files are read from a workspace that holds every file the topics name (the repository's checkout,
which ``vak run`` passes), else from ``sessions/text-corpus/workspace/``: a snapshot of those files shipped
with the package. The snapshot is the default, so a session written from a seed stays byte for byte the
same whatever the repository's files become (tests pin it by digest).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from vak_context.agent.workspace import Workspace
from vak_context.bm25 import Bm25Index, best_first
from vak_context.errors import ToolFailure

CORPUS = Path(__file__).resolve().with_name("text-corpus")
SNAPSHOT = CORPUS / "workspace"  # copies of the repository's files, taken at commit bc6cee0
RECORDED = CORPUS / "recorded"  # real command runs: "$ <command>", "[exit N]", then the output as printed
DOCS = ("README.md", "docs/ARCHITECTURE.md", "docs/CAPACITY.md", "docs/EVIDENCE.md", "docs/LEDGER_FORMAT.md",
        "docs/PLANNER.md")  # what search_docs searches


@dataclass(frozen=True)
class Command:
    """A shell command line and what running it in a workspace root prints: (output, exit code)."""

    line: str
    run: Callable[[Path], tuple[str, int]] = field(compare=False, repr=False)
    reads: tuple[str, ...] = ()  # the workspace files it prints from


@dataclass(frozen=True)
class WorkspaceCall:
    """A workspace tool call (``read_file``, ``list_dir``, ``grep``), or a shell command through ``bash``, that a
    generated session's step makes (docs/TURNS.md "Tool calls")."""

    name: str
    args: dict[str, Any]
    command: Command | None = None


@dataclass(frozen=True)
class Topic:
    """One directive and the call each kind of step makes for it; ``term`` is what answers quote lines for."""

    entity: str
    domain: str
    question: str
    term: str
    read: WorkspaceCall
    search: str
    command: WorkspaceCall
    json: WorkspaceCall
    error: WorkspaceCall

    def call(self, kind: str, results: int = 8) -> WorkspaceCall:
        if kind == "search":
            return WorkspaceCall("search_docs", {"query": self.search, "max_results": results})
        return {"read": self.read, "command": self.command, "json": self.json, "error": self.error}[kind]


def _text(root: Path, path: str) -> str:
    return (root / path).read_text(encoding="utf-8")


def _lines(text: str) -> list[str]:
    """Lines as the shell tools split them: on newlines only, each keeping its own."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def bash(command: Command) -> WorkspaceCall:
    return WorkspaceCall("bash", {"command": command.line}, command)


def cat(*paths: str) -> Command:
    return Command(shlex.join(["cat", *paths]), lambda root: ("".join(_text(root, p) for p in paths), 0), paths)


def head(n: int, *paths: str) -> Command:
    """``head -n N``: with several files, each behind a ``==> path <==`` line, a blank line between."""
    def run(root: Path) -> tuple[str, int]:
        parts = []
        for i, path in enumerate(paths):
            banner = (("\n" if i else "") + f"==> {path} <==\n") if len(paths) > 1 else ""
            parts.append(banner + "".join(_lines(_text(root, path))[:n]))
        return "".join(parts), 0

    return Command(shlex.join(["head", "-n", str(n), *paths]), run, paths)


def grep_n(pattern: str, *paths: str) -> Command:
    """``grep -n`` of a literal (nothing a basic regular expression treats specially), in argument order;
    exit 1 when nothing matches, as grep exits."""
    if not re.fullmatch(r"[\w ,<>=-]+", pattern):
        raise ValueError(f"grep_n takes a plain literal, not {pattern!r}")

    def run(root: Path) -> tuple[str, int]:
        hits = [f"{path + ':' if len(paths) > 1 else ''}{n}:{line.rstrip(chr(10))}\n"
                for path in paths for n, line in enumerate(_lines(_text(root, path)), 1) if pattern in line]
        return "".join(hits), 0 if hits else 1

    return Command(shlex.join(["grep", "-n", pattern, *paths]), run, paths)


def toml_json(*keys: str) -> Command:
    """One table of pyproject.toml printed as JSON, by a one-line Python program."""
    index = "".join(f'["{k}"]' for k in keys)
    code = f'import json, tomllib; print(json.dumps(tomllib.load(open("pyproject.toml", "rb")){index}, indent=2))'

    def run(root: Path) -> tuple[str, int]:
        value: Any = tomllib.loads(_text(root, "pyproject.toml"))
        for k in keys:
            value = value[k]
        return json.dumps(value, indent=2) + "\n", 0

    return Command(shlex.join(["python", "-c", code]), run, ("pyproject.toml",))


def recorded(name: str) -> Command:
    """A command run once for real (``sessions/text-corpus/recorded/``): its output as it printed then."""
    first, status, output = (RECORDED / name).read_text(encoding="utf-8").split("\n", 2)
    code = int(status.removeprefix("[exit ").removesuffix("]"))
    return Command(first.removeprefix("$ "), lambda _root: (output, code))


@cache
def topics() -> tuple[Topic, ...]:
    """The directives a generated session asks, in the order turns take them."""
    return (
        Topic("README.md", "overview", "Read README.md and tell me in two sentences what this project is.",
              "ledger", WorkspaceCall("read_file", {"path": "README.md"}), "what is vak-context: a context engine for LLM agents",
              bash(head(12, "README.md")), bash(toml_json("project")),
              WorkspaceCall("read_file", {"path": "docs/OVERVIEW.md"})),
        Topic("docs/LEDGER_FORMAT.md", "storage",
              "How does the ledger make an append durable? docs/LEDGER_FORMAT.md should say; quote it.",
              "fsync", WorkspaceCall("read_file", {"path": "docs/LEDGER_FORMAT.md"}), "append durable fsync group commit",
              bash(grep_n("fsync", "docs/LEDGER_FORMAT.md", "docs/ARCHITECTURE.md")),
              bash(toml_json("project", "dependencies")), WorkspaceCall("list_dir", {"path": "docs/LEDGER_FORMAT.md"})),
        Topic("docs/PLANNER.md", "planner",
              "What does the planner do when the current turn is larger than its room? Look in docs/PLANNER.md.",
              "current turn", WorkspaceCall("read_file", {"path": "docs/PLANNER.md"}), "current turn larger than its room",
              bash(grep_n("current turn", "docs/PLANNER.md")), bash(cat("context/history/card_defs/table.json")),
              WorkspaceCall("grep", {"pattern": "current turn (", "path": "docs"})),
        Topic("docs/CAPACITY.md", "capacity",
              "How is a model's instruction horizon measured? Read docs/CAPACITY.md and say what the ladder does.",
              "horizon", WorkspaceCall("read_file", {"path": "docs/CAPACITY.md"}), "instruction horizon probe ladder rungs",
              bash(grep_n("horizon", "docs/CAPACITY.md")), bash(toml_json("project", "optional-dependencies")),
              WorkspaceCall("read_file", {"path": "vak-probe/local-qwen/profile.json"})),
        Topic("Makefile", "build", "Which command runs the tests, and what does it run before them? Check the Makefile.",
              "test", WorkspaceCall("read_file", {"path": "Makefile"}), "make test lint ruff mypy",
              bash(recorded("pytest-events.txt")), bash(toml_json("tool", "pytest", "ini_options")),
              bash(recorded("pytest-sessiongen.txt"))),
        Topic("docs/EVIDENCE.md", "evidence",
              "What happens to a tool result over 30,000 characters? Compare docs/EVIDENCE.md and docs/PLANNER.md.",
              "30,000", WorkspaceCall("read_file", {"path": "docs/EVIDENCE.md"}), "tool result window 30,000 characters recall",
              bash(cat("docs/EVIDENCE.md", "docs/PLANNER.md")), bash(cat("context/history/card_defs/metric.json")),
              WorkspaceCall("read_file", {"path": "docs/WINDOWS.md"})),
        Topic("docs/ARCHITECTURE.md", "architecture",
              "Which Ray actors are there and what does each one own? See docs/ARCHITECTURE.md.",
              "Actor", WorkspaceCall("read_file", {"path": "docs/ARCHITECTURE.md"}), "ray actors ledger probe evidence assembler",
              bash(grep_n("Actor", "docs/ARCHITECTURE.md")), bash(toml_json("tool", "setuptools", "package-dir")),
              WorkspaceCall("grep", {"pattern": "Actor", "path": "src"})),
        Topic("pyproject.toml", "packaging", "Which Python version and which dependencies does pyproject.toml require?",
              "requires", WorkspaceCall("read_file", {"path": "pyproject.toml"}), "install python version dependencies",
              bash(grep_n(">=", "pyproject.toml")), bash(toml_json("project", "dependencies")),
              WorkspaceCall("read_file", {"path": "requirements.txt"})),
        Topic("docs/", "overview", "List what is in docs/ and say in a line what each document covers.",
              "#", WorkspaceCall("list_dir", {"path": "docs"}), "one page overview of each part",
              bash(head(3, *DOCS[1:])), bash(toml_json("project", "scripts")),
              WorkspaceCall("list_dir", {"path": "documentation"})),
    )


def named_files() -> tuple[str, ...]:
    """Every file a topic reads: a workspace holding them all is used as the session's source."""
    found = set(DOCS)
    for topic in topics():
        for call in (topic.read, topic.command, topic.json):
            if call.name == "read_file":
                found.add(call.args["path"])
            elif call.command is not None:
                found.update(call.command.reads)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Section:
    path: str
    heading: str
    lines: tuple[str, ...]

    @property
    def anchor(self) -> str:
        """The heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as hyphens."""
        return re.sub(r"[^\w\- ]", "", self.heading.lower()).replace(" ", "-")


def sections(path: str, text: str) -> list[Section]:
    """A markdown file's sections: each heading (outside code fences) and the lines up to the next one."""
    out: list[Section] = []
    heading, fenced = "", False
    body: list[str] = []
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,6} ", line):
            if heading:
                out.append(Section(path, heading, tuple(body)))
            heading, body = line.lstrip("#").strip(), []
        elif heading:
            body.append(line)
    if heading:
        out.append(Section(path, heading, tuple(body)))
    return out


class Corpus:
    """The files a session is about and the tools over them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = Workspace(root)
        self._index: tuple[list[Section], Bm25Index[int]] | None = None

    def run(self, call: WorkspaceCall) -> tuple[str, bool]:
        """The call's result as the model would read it, and whether it is an error."""
        if call.command is not None:
            output, code = call.command.run(self.root)
            # Claude Code's Bash result: the output, led by "Exit code N" when the command failed.
            return (f"Exit code {code}\n{output}" if code else output), code != 0
        if call.name == "search_docs":
            return self.search(str(call.args["query"]), int(call.args["max_results"])), False
        try:
            return self.workspace.call(call.name, call.args), False
        except ToolFailure as exc:
            return str(exc), True  # as the turn loop returns a failed workspace call

    def search(self, query: str, k: int) -> str:
        """The sections of DOCS that BM25 ranks highest for ``query``, as JSON search results."""
        if self._index is None:
            found = [s for path in DOCS for s in sections(path, _text(self.root, path)) if _excerpt(s.lines)]
            index: Bm25Index[int] = Bm25Index()
            for i, s in enumerate(found):
                index.add(i, s.heading + "\n" + "\n".join(s.lines))
            self._index = (found, index)
        found, index = self._index
        results = []
        for i, score in best_first(index.search(query))[:k]:
            s = found[i]
            results.append({"title": f"{s.heading} ({s.path})", "url": f"{s.path}#{s.anchor}",
                            "content": _excerpt(s.lines), "score": round(score, 3)})
        return json.dumps({"query": query, "results": results}, indent=2, ensure_ascii=False)


def _excerpt(lines: tuple[str, ...], chars: int = 400) -> str:
    """The section's first whole lines, about ``chars`` long: a verbatim piece of the file."""
    body = list(lines)
    while body and not body[0].strip():
        body.pop(0)
    out: list[str] = []
    for line in body:
        out.append(line)
        if sum(map(len, out)) >= chars:
            break
    return "\n".join(out).rstrip()


def session_corpus(workspace: Path | None = None) -> Corpus:
    """The workspace when it holds every file the topics read (this repository's checkout), else the snapshot."""
    if workspace is not None and all((workspace / p).is_file() for p in named_files()):
        return Corpus(workspace.resolve())
    return Corpus(SNAPSHOT)


# ------------------------------------------------------------------ quoting results

_NUMBERED = re.compile(r"^\s*\d+\t|^(?:[\w./-]+:)?\d+:")  # read_file's "  12\t" and grep -n's "path:12:"
_DRAWING = re.compile(r"[│┌┐└┘├┤┬┴─▶◀═]|\s{3,}")  # diagram and table art: not a line to quote
_PYTEST_SUMMARY = re.compile(r"^\d+ (?:passed|failed)\b")


def _quotable(text: str, words: int) -> bool:
    """A line an answer can quote: prose with at least ``words`` words, short, no diagram art, no quotes
    of the answer's own kind (the answer marks its quotes with them)."""
    return (len(re.findall(r"[A-Za-z]{2,}", text)) >= words and len(text) <= 200 and not _DRAWING.search(text)
            and not text.startswith(("|", "```")) and "“" not in text and "”" not in text)


def quote(call: WorkspaceCall, body: str, term: str, *, is_error: bool) -> str:
    """One line of ``body``, verbatim, for an answer to quote: a failure's last line (where it says what
    failed), a test run's summary, a listing's first names, else the first line naming ``term``, else the
    first line of prose."""
    if call.name == "search_docs":
        results = json.loads(body)["results"]
        body = results[0]["content"] if results else body
    lines = [line for line in body.split("\n") if line.strip()]
    if call.name == "bash" and lines and lines[0].startswith("Exit code "):
        lines = lines[1:]
    if call.name == "list_dir" and not is_error:
        return "”, “".join(line.split("\t")[0] for line in lines[1:5])
    texts = [_NUMBERED.sub("", line, count=1).strip().rstrip(",") for line in lines] or [body.strip()]
    if is_error or _PYTEST_SUMMARY.match(texts[-1]):
        return next((t for t in reversed(texts) if _quotable(t, 1)), texts[-1])
    term = term.lower()
    return (next((t for t in texts if term in t.lower() and _quotable(t, 2)), None)
            or next((t for t in texts if _quotable(t, 2)), texts[0]))


def said(call: WorkspaceCall, quoted: str, *, is_error: bool) -> str:
    """The answer's sentence for one result."""
    if is_error:
        return f"The {call.name} call failed: “{quoted}”."
    if call.name == "bash":
        command = str(call.args["command"])
        return f"`{command}` prints “{quoted}”." if len(command) <= 60 else f"The command prints “{quoted}”."
    if call.name == "search_docs":
        return f"The best match in the docs says “{quoted}”."
    if call.name == "list_dir":
        return f"The listing of {call.args['path']} shows “{quoted}”."
    return f"{call.args['path']} says “{quoted}”."


def thought(call: WorkspaceCall, topic: Topic) -> str:
    """The model's reason for a call, before it makes it."""
    if call.name == "search_docs":
        return f"The docs should cover this; I will search them for {call.args['query']!r}."
    if call.name == "bash":
        return f"To see it directly I will run `{call.args['command']}`."
    if call.name == "list_dir":
        return f"I will list {call.args['path']} to see what is there."
    if call.name == "grep":
        return f"I will grep for {call.args['pattern']!r} under {call.args['path']}."
    if call.args["path"] != topic.entity:
        return f"{call.args['path']} may hold the answer; I will read it."
    return f"The question is about {topic.entity}; I will read it first."
