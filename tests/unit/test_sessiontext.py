"""The main job's generated session reads as a real one (issue 22 item 8): its directives ask about files
that exist, every tool result is what that tool or command returns over the repository's files (the
snapshot shipped in sessions/text-corpus/, or the workspace `vak run` is given), its answers quote those
results, and none of it is the filler the generator once wrote ("Packet turn replay segment arrow ...")."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vak_context.agent.workspace import Workspace
from vak_context.cli.mainjob import run_main_job
from vak_context.errors import ToolFailure
from vak_context.events.payloads import (
    AssistantStep,
    Compaction,
    Directive,
    EvidenceBody,
    Presentation,
    ResetWithHandoff,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    TurnCard,
)
from vak_context.sessions.generator import generate_session
from vak_context.sessions.text import DOCS, RECORDED, SNAPSHOT, named_files, sections

# The generator's old word list: every sentence it wrote was a run of these (tests pin that none is left).
FILLER = frozenset("ledger segment commit batch model token window horizon probe cache prefix digest evidence "
                   "turn card packet planner actor session arrow schema replay budget latency throughput".split())
SEED, TURNS = 7, 12  # run_main_job's defaults: the session `vak run` writes
_QUOTE = re.compile(r"“([^“”]*)”")
assert run_main_job.__kwdefaults__ is not None
assert (run_main_job.__kwdefaults__["seed"], run_main_job.__kwdefaults__["turns"]) == (SEED, TURNS)


@dataclass
class Result:
    name: str
    args: dict[str, Any]
    body: str
    is_error: bool


@dataclass
class Turn:
    directive: str
    results: list[Result] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    answer: str = ""
    card_narration: str = ""


@dataclass
class Written:
    turns: list[Turn]
    other: list[str]  # the handoff, the compaction's summary, the cards' labels

    def texts(self) -> list[str]:
        out = list(self.other)
        for t in self.turns:
            out += [t.directive, t.answer, *t.thoughts, *(r.body for r in t.results)]
        return out


def _read(seed: int = SEED, turns: int = TURNS, workspace: Path | None = None) -> Written:
    session = generate_session(seed=seed, turns=turns, workspace=workspace)
    got: list[Turn] = []
    other: list[str] = []
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for payload, blob in session.items:
        if isinstance(payload, Directive):
            got.append(Turn(payload.text))
        elif isinstance(payload, AssistantStep):
            for block in payload.blocks:
                if isinstance(block, ToolUseBlock):
                    calls[block.id] = (block.name, dict(block.input))
                elif isinstance(block, ThinkingBlock):
                    got[-1].thoughts.append(block.thinking)
                elif isinstance(block, TextBlock):
                    got[-1].answer = block.text
        elif isinstance(payload, EvidenceBody):
            assert blob is not None
            name, args = calls[payload.tool_use_id]
            got[-1].results.append(Result(name, args, blob.decode(), payload.is_error))
        elif isinstance(payload, TurnCard):
            got[-1].card_narration = payload.answered.narration
        elif isinstance(payload, ResetWithHandoff):
            other.append(payload.handoff)
        elif isinstance(payload, Compaction):
            other.append(payload.summary)
        elif isinstance(payload, Presentation):
            other.append(str(payload.payload["label"]))
    assert len(got) == session.turns == turns
    return Written(got, other)


def _recordings() -> dict[str, tuple[str, int]]:
    """Recorded command line -> (output, exit code)."""
    out = {}
    for path in sorted(RECORDED.iterdir()):
        first, status, output = path.read_text(encoding="utf-8").split("\n", 2)
        out[first.removeprefix("$ ")] = (output, int(status.removeprefix("[exit ").removesuffix("]")))
    return out


def _shell(command: str, root: Path) -> tuple[str, int]:
    """The command run for real by bash in ``root``, stderr with stdout as a Bash tool shows them; ``python``
    is this interpreter."""
    if command.startswith("python "):
        command = shlex.quote(sys.executable) + command.removeprefix("python")
    done = subprocess.run(["bash", "-c", command], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=60, check=False, env={**os.environ, "LC_ALL": "C.UTF-8"})
    return done.stdout.decode(), done.returncode


def _check_results(written: Written, root: Path) -> Counter[str]:
    """Every result is what its tool returns over ``root``: the workspace tools run again here, each shell
    command run for real (a recorded one is its recording), each search hit a verbatim piece of its file."""
    workspace, recordings = Workspace(root), _recordings()
    seen: Counter[str] = Counter()
    for turn in written.turns:
        for r in turn.results:
            seen[r.name] += 1
            if r.name in {"read_file", "list_dir", "grep"}:
                try:
                    expected, failed = workspace.call(r.name, r.args), False
                except ToolFailure as exc:
                    expected, failed = str(exc), True
            elif r.name == "bash":
                output, code = recordings.get(r.args["command"]) or _shell(r.args["command"], root)
                expected, failed = (f"Exit code {code}\n{output}" if code else output), code != 0
                if r.args["command"].startswith("python -c"):
                    json.loads(r.body)  # the JSON results are real JSON
            else:
                assert r.name == "search_docs", r.name
                _check_search(r, root)
                continue
            assert (r.body, r.is_error) == (expected, failed), (r.name, r.args)
    return seen


def _check_search(r: Result, root: Path) -> None:
    hits = json.loads(r.body)["results"]
    assert 0 < len(hits) <= r.args["max_results"] and json.loads(r.body)["query"] == r.args["query"]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    for hit in hits:
        path, anchor = hit["url"].split("#")
        text = (root / path).read_text(encoding="utf-8")
        assert path in DOCS and hit["content"] and hit["content"] in text
        assert anchor in {s.anchor for s in sections(path, text)} and hit["title"].endswith(f" ({path})")


@pytest.mark.parametrize("seed", [SEED, 0, 3])
def test_every_result_is_what_its_tool_returns_over_the_repository_files(seed: int) -> None:
    """File reads, listings, failed calls, shell output, JSON and docs search: each result, byte for byte,
    is what the real tool or command gives over the shipped snapshot of the repository's files."""
    seen = _check_results(_read(seed=seed), SNAPSHOT)
    assert {"read_file", "bash", "search_docs"} <= set(seen)


def test_the_main_job_session_asks_about_real_files_and_answers_with_quotes_of_its_results() -> None:
    """Each directive names files that exist; each answer (and its turn card) quotes, verbatim, the results
    of its own turn, at least once."""
    written = _read()
    for turn in written.turns:
        named = re.findall(r"[\w./-]+\.(?:md|toml|json)|Makefile|docs/", turn.directive)
        assert named and all((SNAPSHOT / p).exists() for p in named), turn.directive
        assert turn.card_narration == turn.answer
        quotes = [q for span in _QUOTE.findall(turn.answer) for q in span.split("”, “")]
        assert quotes, turn.answer
        said = [r.body for r in turn.results]
        said += [h["content"] for r in turn.results if r.name == "search_docs" for h in json.loads(r.body)["results"]]
        for q in quotes:
            assert any(q in text for text in said), (q, turn.directive)


def test_the_main_job_session_is_not_word_salad() -> None:
    """No text of the session holds a run of five words of the old filler vocabulary (every old sentence
    was one; the repository's docs have runs of four), and its words are not a small vocabulary recycled: thousands of distinct words, the 26 most
    frequent under half of all (the old generator's 26 words were all of them)."""
    texts = _read().texts()
    words: list[str] = []
    for text in texts:
        run = 0
        for w in re.findall(r"[a-z]+", text.lower()):
            run = run + 1 if w in FILLER else 0
            assert run < 5, text[:300]
            words.append(w)
    counts = Counter(words)
    assert len(counts) > 1500
    assert sum(n for _, n in counts.most_common(26)) < len(words) / 2


def test_the_text_comes_from_the_workspace_that_holds_the_files_else_from_the_snapshot(tmp_path: Path) -> None:
    """Given a workspace with every file the directives read, the session is read from it (a line added to
    its docs shows up, every result is what the tools return there); a workspace without them gives the
    snapshot's session, byte for byte."""
    workspace = tmp_path / "repo"
    shutil.copytree(SNAPSHOT, workspace)
    line = "Added in this workspace only: the session must read it from here."
    for path in DOCS:
        lines = (workspace / path).read_text(encoding="utf-8").split("\n")
        (workspace / path).write_text("\n".join([lines[0], line, *lines[1:]]), encoding="utf-8")
    written = _read(workspace=workspace)
    _check_results(written, workspace)
    assert any(line in r.body for t in written.turns for r in t.results)

    (workspace / named_files()[0]).unlink()
    fallback = generate_session(SEED, TURNS, workspace=workspace)
    assert fallback.ids == generate_session(SEED, TURNS).ids
    assert generate_session(SEED, TURNS, workspace=tmp_path / "absent").ids == fallback.ids
