"""bench/demo_compare.py against the scripted reader (tests/fakes/demo_reader.py), run as a user runs it, in a
child process: the demo's three questions asked with the engine and by the plain loop, scored by
cli/demoscore.py, and the per-question table with its totals and ratio.

The reader answers only from what each request holds, so the scores are the harness's and the projection's,
not a script's: on a small workspace whose README fits every request whole, both modes answer all three
questions; on one whose README never says ``make test``, the test-command answer is wrong in both, which
shows the answers really go through the scorer. The plain loop's requests are asserted to be what its
docstring says (its own one-line system prompt, the three workspace tools, temperature 0, 128 tokens) and
the engine's to be the engine's (its tools besides the workspace's)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "demo_compare.py"

pytestmark = [pytest.mark.timeout(300)]


def workspace(root: Path, readme: str) -> Path:
    root.mkdir()
    (root / "README.md").write_text(readme, encoding="utf-8")
    (root / "Makefile").write_text("test:\n\tpytest\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "setup.cfg").write_text("[metadata]\nname = shelf\n", encoding="utf-8")
    return root


def bench(tmp_path: Path, upstream: str, folder: Path, runs: int) -> tuple[str, list[dict], Path]:
    dump, out = tmp_path / f"dump-{folder.name}", tmp_path / f"{folder.name}.json"
    done = subprocess.run([sys.executable, str(BENCH), "--upstream", upstream, "--runs", str(runs),
                           "--workspace", str(folder), "--ledger", str(tmp_path / f"ledger-{folder.name}"),
                           "--dump", str(dump), "--json", str(out)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text(encoding="utf-8")), dump


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    return {q: (e, p) for q, e, p in re.findall(r"^\| (\w+) \| (\d+/\d+) \| (\d+/\d+) \|$", stdout, re.MULTILINE)}


README = ("# Shelf\n\nShelf keeps a catalogue of borrowed books, their borrowers and due dates in one SQLite file.\n\n"
          "## Tests\n\nRun `make test` from the repository root.\n")


@pytest.mark.parametrize("upstream", ["scripted", "scripted-fenced"])
def test_both_modes_answer_the_three_questions_when_every_request_shows_what_was_read(tmp_path: Path,
                                                                                       upstream: str) -> None:
    stdout, runs, dump = bench(tmp_path, upstream, workspace(tmp_path / "shelf", README), runs=2)
    assert rows(stdout) == {"listing": ("2/2", "2/2"), "readme": ("2/2", "2/2"), "test_command": ("2/2", "2/2"),
                            "total": ("6/6", "6/6")}
    assert "engine / plain: 1.00 (6 against 6 right answers, 2 engine run(s), 2 plain run(s))" in stdout
    assert [(r["mode"], r["run"]) for r in runs] == [("engine", 1), ("plain", 1), ("engine", 2), ("plain", 2)]
    for run in runs:
        assert [(a["check"], a["outcome"], a["right"]) for a in run["answers"]] == [
            ("listing", "completed", True), ("readme", "completed", True), ("test_command", "completed", True)]
        listing, readme, _ = run["answers"]
        assert listing["steps"] == readme["steps"] == 2  # a call, then the answer from its result
        assert "Makefile, README.md, setup.cfg, src" in listing["answer"]
    plain = [json.loads(line) for line in (dump / "plain-1.jsonl").read_text().splitlines()]
    assert len(plain) == 5  # list_dir, answer; read_file, answer; answer
    for body in plain:
        assert [t["function"]["name"] for t in body["tools"]] == ["read_file", "list_dir", "grep"]
        assert body["temperature"] == 0 and body["max_tokens"] == 128
        assert body["messages"][0]["content"].startswith("You are a coding agent.")
    assert plain[-1]["messages"][-1] == {"role": "user", "content": "Which command runs the tests, according to what "
                                         "you read? Answer in one sentence."}
    # The README read a turn back is resent whole.
    assert any("3\tShelf keeps a catalogue" in (m.get("content") or "") for m in plain[-1]["messages"][:-1])
    engine = [json.loads(line) for line in (dump / "engine-1.jsonl").read_text().splitlines()]
    assert len(engine) == 5
    assert {"recall", "read_file", "list_dir", "grep"} <= {t["function"]["name"] for t in engine[0]["tools"]}
    assert engine[0]["temperature"] == 0 and engine[0]["max_tokens"] == 128


def test_an_answer_the_workspace_does_not_hold_scores_wrong_in_both_modes(tmp_path: Path) -> None:
    folder = workspace(tmp_path / "quiet", "# Quiet\n\nQuiet mutes notifications on a schedule for remote teams.\n")
    stdout, runs, _ = bench(tmp_path, "scripted", folder, runs=1)
    assert rows(stdout) == {"listing": ("1/1", "1/1"), "readme": ("1/1", "1/1"), "test_command": ("0/1", "0/1"),
                            "total": ("2/3", "2/3")}
    assert "engine / plain: 1.00 (2 against 2 right answers" in stdout
    for run in runs:
        assert run["answers"][2]["answer"] == "Run pytest."
        assert run["answers"][2]["reason"] == "does not name `make test`"


def test_a_readme_too_long_for_the_room_is_read_on_through_the_recall_call_its_lead_names(tmp_path: Path) -> None:
    # ~16 KB: the read comes back as a digest, the recall as its leading lines (not that digest again), and
    # `make test` sits on line 25, past them: the engine reads it by following the recall call the lead names.
    def notes(first: int, last: int) -> str:
        return "".join(f"Line {n} of the notes: the catalogue keeps borrowers and due dates, checked nightly.\n"
                       for n in range(first, last))

    readme = (f"# Shelf\n\nShelf keeps a catalogue of borrowed books, their borrowers and due dates in one file.\n\n"
              f"{notes(5, 25)}Run `make test` from the repository root.\n{notes(26, 200)}")
    stdout, _, dump = bench(tmp_path, "scripted", workspace(tmp_path / "long", readme), runs=1)
    assert rows(stdout)["test_command"] == ("1/1", "1/1"), stdout[-3000:]
    engine = [json.loads(line) for line in (dump / "engine-1.jsonl").read_text().splitlines()]
    made = {c["function"]["arguments"] for body in engine for m in body["messages"]  # a packet may hide step 1
            for c in m.get("tool_calls") or [] if c["function"]["name"] == "recall"}
    recalls = sorted((json.loads(a) for a in made), key=lambda r: "range" in r)
    assert len(recalls) == 2 and "range" not in recalls[0] and recalls[1]["range"][1] > recalls[1]["range"][0] > 1
    assert recalls[1]["id"] == recalls[0]["id"]
