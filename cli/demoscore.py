"""The demo's answer score: each of `vak run`'s three live directives judged mechanically against the workspace.

It lives in cli/ beside the main job it scores: the checks are about the demo's own directives (this table is
where they are written down), and ``run_live_turns`` may import only the public package and the CLI's own
modules (tests/unit/test_cli_public_api.py). The checks are pure functions of strings; ``workspace_facts`` is
the one function that reads the folder.

The checks (issue 24 item 5), each a right/wrong with the reason:

* **listing** ("List the files in the workspace."): at least three distinct real entry names of the workspace
  folder appear in the answer. A name counts only as a whole name: not inside a longer word or path segment
  (``cli`` is not found in ``client``, ``vak-context`` or ``cli.py``), and case-sensitively, as file names
  are (``readme.md`` is not ``README.md``).
* **readme** ("Read README.md and say in one sentence what this project is."): at least three content words
  shared with README.md's first paragraph (the first block of non-blank lines that is not a heading).
* **test_command** ("Which command runs the tests ..."): the answer names ``make test`` (any case, any
  spacing between the two words; ``make tests`` or ``make test-unit`` is another command).

Only the model's answer is scored: a turn that did not end ``completed`` (a rule closed it ``degraded``, e.g. the
repeated-call rule quoting the results the turn had, or it ``failed``) is wrong whatever its closing statement
says, since that statement is the engine's (it quotes the very listing and README the checks look for).

A word token is a maximal run of ASCII letters and digits in the lower-cased text (``hash-linked`` is two
tokens, ``README.md`` is ``readme`` and ``md``); a content word is a token of at least three characters,
not all digits, and not in ``STOP_WORDS``. What the directive itself says earns nothing: an answer that
only repeats the question scores no entry name, no content word and no command from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Check = Literal["listing", "readme", "test_command"]

# The demo's three directives (unchanged since the demo began), each with the check that scores its answer.
DEMO_CHECKS: Mapping[str, Check] = {
    "List the files in the workspace.": "listing",
    "Read README.md and say in one sentence what this project is.": "readme",
    "Which command runs the tests, according to what you read? Answer in one sentence.": "test_command",
}
NEEDED = {"listing": 3, "readme": 3}  # real entry names, shared content words

# Function words and the fillers of a one-sentence answer ("this project is a ..."): they say nothing about
# what was read.
STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing done down during each either etc few for from further get
gets got had has have having he her here hers him his how however i if in into is it its itself just like
made make makes many may me more most much must my no nor not now of off on once one only or other our ours
out over own per same she should since so some such than that the their theirs them then there these they
this those through thus to too under until up upon us use used uses using very via was way we well were
what when where which while who whom why will with within without would yes yet you your yours
project projects repository repo readme file files says said say sentence
""".split())

_TOKEN = re.compile(r"[a-z0-9]+")
_MAKE_TEST = re.compile(r"(?<![\w-])make\s+test(?![\w-])", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """One directive's answer judged: the check, right or wrong, why, and what it found."""

    directive: str
    check: Check
    right: bool
    reason: str
    found: tuple[str, ...]

    def line(self) -> str:
        return f"{'right' if self.right else 'wrong'}  {self.check:<12} {self.reason}"


@dataclass(frozen=True)
class DemoScore:
    verdicts: tuple[Verdict, ...]

    @property
    def right(self) -> int:
        return sum(v.right for v in self.verdicts)

    @property
    def of(self) -> int:
        return len(self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {"right": self.right, "of": self.of, "verdicts": [asdict(v) for v in self.verdicts]}


def tokens(text: str) -> list[str]:
    """The word tokens of ``text``: runs of ASCII letters and digits, lower-cased."""
    return _TOKEN.findall(text.lower())


def content_words(text: str) -> set[str]:
    """The content words of ``text``: tokens of three or more characters, not all digits, not stop words."""
    return {t for t in tokens(text) if len(t) >= 3 and not t.isdigit() and t not in STOP_WORDS}


def first_paragraph(readme: str) -> str:
    """The first block of non-blank lines of a Markdown text that is not a heading (``#`` lines are skipped)."""
    block: list[str] = []
    for line in readme.splitlines():
        if not line.strip():
            if block:
                break
            continue
        if line.lstrip().startswith("#"):
            if block:
                break
            continue
        block.append(line.strip())
    return " ".join(block)


def names_in(text: str, names: Iterable[str]) -> list[str]:
    """The ``names`` that occur in ``text`` as whole names (case-sensitive), in sorted order."""
    found = []
    for name in sorted(set(names)):
        if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", text):
            found.append(name)
    return found


def score_listing(directive: str, answer: str, entries: Iterable[str]) -> Verdict:
    quoted = set(names_in(directive, entries))
    found = tuple(n for n in names_in(answer, entries) if n not in quoted)
    right = len(found) >= NEEDED["listing"]
    reason = (f"{len(found)} real entr{'y' if len(found) == 1 else 'ies'} named"
              + (f" ({', '.join(found[:6])}{', ...' if len(found) > 6 else ''})" if found else "")
              + f"; {NEEDED['listing']} needed")
    return Verdict(directive, "listing", right, reason, found)


def score_readme(directive: str, answer: str, paragraph: str | None) -> Verdict:
    if paragraph is None:
        return Verdict(directive, "readme", False, "the workspace has no README.md to compare with", ())
    found = tuple(sorted((content_words(answer) & content_words(paragraph)) - content_words(directive)))
    right = len(found) >= NEEDED["readme"]
    reason = (f"{len(found)} content word{'' if len(found) == 1 else 's'} shared with README.md's first paragraph"
              + (f" ({', '.join(found[:6])}{', ...' if len(found) > 6 else ''})" if found else "")
              + f"; {NEEDED['readme']} needed")
    return Verdict(directive, "readme", right, reason, found)


def score_test_command(directive: str, answer: str) -> Verdict:
    named = _MAKE_TEST.search(answer) is not None and _MAKE_TEST.search(directive) is None
    return Verdict(directive, "test_command", named,
                   "names `make test`" if named else "does not name `make test`",
                   ("make test",) if named else ())


def score_answers(turns: Sequence[tuple[str, str, str]], entries: Iterable[str],
                  readme: str | None) -> DemoScore | None:
    """Score each (directive, answer, outcome) whose directive is one of the demo's (``DEMO_CHECKS``); None
    when none is (a caller's own directives are not scored). ``readme`` is README.md's text, None when there
    is none. A turn whose outcome is not ``completed`` is wrong: its answer is a rule's, not the model's."""
    entries = list(entries)
    paragraph = first_paragraph(readme) if readme is not None else None
    verdicts = []
    for directive, answer, outcome in turns:
        check = DEMO_CHECKS.get(directive)
        if check is not None and outcome != "completed":
            verdicts.append(Verdict(directive, check, False, f"the turn ended {outcome}: its answer is a rule's "
                                    "closing statement, not the model's", ()))
        elif check == "listing":
            verdicts.append(score_listing(directive, answer, entries))
        elif check == "readme":
            verdicts.append(score_readme(directive, answer, paragraph))
        elif check == "test_command":
            verdicts.append(score_test_command(directive, answer))
    return DemoScore(tuple(verdicts)) if verdicts else None


def workspace_facts(workspace: Path) -> tuple[list[str], str | None]:
    """The workspace folder's entry names and its README.md's text (None when it has none)."""
    entries = sorted(p.name for p in workspace.iterdir())
    readme = workspace / "README.md"
    try:
        return entries, readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None
    except OSError:
        return entries, None


def render_score(score: DemoScore, seconds: float | None = None) -> str:
    """The verdict lines and the score line (with the time when given)."""
    lines = [f"  {i}. {v.line()}" for i, v in enumerate(score.verdicts, 1)]
    timing = f" in {seconds:.1f} s" if seconds is not None else ""
    lines.append(f"demo score {score.right}/{score.of}{timing}")
    return "\n".join(lines)
