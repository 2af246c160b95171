"""Shape detection and digests on the real recorded sessions in ../shared/data/trajectories (issue 4 item 2).

A small reader pulls every tool result out of each file, in each file's own format (see the README
there), as the model saw it. The tests assert the shapes of known examples, and invariants over
every result: each digest ends with its tag, errors are verbatim, no digest is a character-count
cut of its body, and every window stays under the limit and names a recallable range.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.recall import expand
from tests.fakes.trajectory_readers import READERS, Result
from vak_context.context.evidence.digest import (
    DIGEST_CHARS,
    SHAPES,
    WINDOW_CHARS,
    detect_shape,
    digest,
    evidence_tag,
    line_count,
    recall_slice,
    window,
)

EID = "7c" * 32


@pytest.fixture(scope="module")
def results(trajectories: Path) -> dict[str, list[Result]]:
    return {name: list(read(trajectories / name)) for name, read in READERS.items()}


def shape(r: Result) -> str:
    return detect_shape(r.body, tool_name=r.tool, is_error=r.is_error, tool_input=r.tool_input)


def counts(rs: list[Result]) -> Counter[tuple[str, str]]:
    return Counter((r.tool, shape(r)) for r in rs)


# ------------------------------------------------------------------ the readers found what the README lists


def test_the_reader_finds_every_recorded_tool_result(results: dict[str, list[Result]]) -> None:
    sizes = {name: len(rs) for name, rs in results.items()}
    assert sizes["spotter__fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"] == 197
    assert sizes["spotter__subagent.jsonl"] == 16
    assert sizes["tau-bench__gpt-4o-airline.json"] == 1164
    assert sizes["OpenHands__output.jsonl"] == 105
    assert sizes["mini-swe-agent__django__django-15629.traj.json"] == 51  # 49 ran, 2 were format errors
    assert sizes["SWE-agent__pydicom__pydicom-1458.traj"] == 11


# ------------------------------------------------------------------ known examples


def test_tau_bench_json_results_and_error_strings(results: dict[str, list[Result]]) -> None:
    rs = results["tau-bench__gpt-4o-airline.json"]
    c = counts(rs)
    assert c[("get_user_details", "json")] == sum(
        1 for r in rs if r.tool == "get_user_details" and r.body[:1] == "{"
    )
    assert c[("search_direct_flight", "json")] > 100
    errors = [r for r in rs if shape(r) == "error"]
    assert len(errors) == 73  # the README's count of "Error:" results
    assert all(r.body.startswith("Error:") for r in errors)
    assert {shape(r) for r in rs if r.tool == "think"} == {"text"}
    assert {shape(r) for r in rs if r.tool == "transfer_to_human_agents"} == {"text"}
    reservation = next(r for r in rs if r.tool == "get_reservation_details" and shape(r) == "json")
    d = digest(reservation.body, EID, tool_name=reservation.tool)
    for key in json.loads(reservation.body):
        assert f"\n  {key}: " in d
    assert "flights: array of" in d and "first in full: {" in d


def test_spotter_web_search_results_are_search_with_every_title_and_url(
    results: dict[str, list[Result]],
) -> None:
    rs = results["spotter__subagent.jsonl"]
    searches = [r for r in rs if r.tool == "WebSearch"]
    assert len(searches) == 5 and all(shape(r) == "search" for r in searches)
    for r in searches:
        links = json.loads(r.body.split("Links: ", 1)[1].split("\n", 1)[0])
        d = digest(r.body, EID, tool_name=r.tool, tool_input=r.tool_input)
        assert f"{len(links)} results" in d
        for link in links:
            assert f"— {link['url']}" in d and link["title"].strip() in d
        assert "Based on the search results" not in d and "REMINDER" not in d
        assert r.tool_input["query"] in d
    assert {shape(r) for r in rs if r.tool == "WebFetch"} == {"text"}


def test_spotter_coding_session_shapes(results: dict[str, list[Result]]) -> None:
    rs = results["spotter__fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"]
    c = counts(rs)
    assert c[("Bash", "command")] == 75 and c[("Bash", "error")] == 1  # the hook's refusal is an error
    assert c[("Read", "text")] + c[("Read", "json")] == 33
    failed = [r for r in rs if r.is_error]
    assert len(failed) == 8
    exit_failures = [r for r in failed if r.body.startswith("Exit code ")]
    assert exit_failures and all(shape(r) == "command" for r in exit_failures)
    for r in exit_failures:
        code = r.body.split("\n", 1)[0].removeprefix("Exit code ")
        assert digest(r.body, EID, tool_name=r.tool, is_error=True).startswith(
            f"command output: exit code {code},"
        )
    hook = [r for r in failed if r.body.startswith("Pre-commit validation failed")]
    assert hook and all(shape(r) == "error" for r in hook)
    read = next(r for r in rs if r.tool == "Read" and r.tool_input.get("file_path", "").endswith(".ex"))
    d = digest(read.body, EID, tool_name="Read", tool_input=read.tool_input)
    assert d.startswith(f"text: {line_count(read.body)} lines") and "definitions (.ex file):" in d
    assert "defmodule" in d


def test_openhands_commands_carry_their_exit_codes(results: dict[str, list[Result]]) -> None:
    rs = results["OpenHands__output.jsonl"]
    runs = [r for r in rs if r.tool == "execute_bash"]
    assert len(runs) == 49 and all(shape(r) == "command" for r in runs)
    nonzero = [r for r in runs if not r.body.endswith("[The command completed with exit code 0.]")]
    assert len(nonzero) == 19  # the README's count of non-zero exit codes
    for r in nonzero:
        code = re.search(r"exit code (-?\d+)\.\]\Z", r.body)
        assert code is not None
        assert digest(r.body, EID, tool_name=r.tool).startswith(f"command output: exit code {code.group(1)},")
    errors = [r for r in rs if r.is_error]
    assert len(errors) == 2 and all(shape(r) == "error" for r in errors)
    editor = [r for r in rs if r.tool == "str_replace_editor"]
    assert {shape(r) for r in editor if r.body.startswith("ERROR:")} == {"error"}  # unflagged, but errors
    assert {shape(r) for r in editor if not r.body.startswith("ERROR:")} == {"text"}


def test_mini_swe_agent_observations_are_commands_with_return_codes(results: dict[str, list[Result]]) -> None:
    rs = results["mini-swe-agent__django__django-15629.traj.json"]
    commands = [r for r in rs if not r.is_error]
    assert all(shape(r) == "command" for r in commands)
    codes = Counter(m.group(1) for r in commands if (m := re.match(r"<returncode>(-?\d+)", r.body)))
    assert codes["1"] == 6
    format_errors = [r for r in rs if r.is_error]
    assert len(format_errors) == 2 and all(shape(r) == "error" for r in format_errors)


def test_swe_agent_observations_are_commands(results: dict[str, list[Result]]) -> None:
    rs = results["SWE-agent__pydicom__pydicom-1458.traj"]
    assert {shape(r) for r in rs} == {"command"}


# ------------------------------------------------------------------ invariants over every result


def all_results(results: dict[str, list[Result]]) -> Iterator[Result]:
    for rs in results.values():
        yield from rs


def test_every_digest_ends_with_its_tag_and_errors_are_verbatim(results: dict[str, list[Result]]) -> None:
    seen: Counter[str] = Counter()
    for r in all_results(results):
        kind = shape(r)
        assert kind in SHAPES
        seen[kind] += 1
        d = digest(r.body, EID, tool_name=r.tool, is_error=r.is_error, tool_input=r.tool_input)
        tag = evidence_tag(EID, len(r.body))
        assert d.endswith(tag), r.source
        assert len(d) <= DIGEST_CHARS, r.source  # issue 9 item 2: bounded, whatever the body
        if kind == "error":
            assert d == r.body + ("" if r.body.endswith("\n") else "\n") + tag, r.source
    assert {"json", "search", "text", "command", "error"} <= set(seen)


def test_no_digest_is_a_character_count_cut_of_its_body(results: dict[str, list[Result]]) -> None:
    for r in all_results(results):
        d = digest(r.body, EID, tool_name=r.tool, is_error=r.is_error, tool_input=r.tool_input)
        content = d[: -len(evidence_tag(EID, len(r.body)))].removesuffix("\n")
        if content in (r.body, r.body.removesuffix("\n")):
            continue  # the whole body, verbatim (errors, one short paragraph)
        assert not r.body.startswith(content), r.source
        prefix_len = len(content) // 2
        assert not (prefix_len > 200 and content.startswith(r.body[:prefix_len])), r.source


def test_every_window_stays_under_the_limit_and_names_a_recallable_range(
    results: dict[str, list[Result]],
) -> None:
    long_ones = 0
    for r in all_results(results):
        w = window(r.body, EID)
        if len(r.body) <= WINDOW_CHARS:
            assert w.text == r.body and not w.windowed
            continue
        long_ones += 1
        assert w.windowed and len(w.text) <= WINDOW_CHARS and w.omitted is not None, r.source
        first, last = w.omitted
        original = r.body[_offset(r.body, first) : _offset(r.body, last + 1)]
        assert f"lines {first}-{last} omitted ({len(original)} chars)" in w.text, r.source
        recalled = recall_slice(r.body, "slice", (first, last))
        assert recalled == (original if len(original) <= WINDOW_CHARS else window(original, "slice").text)
        # every omission line and clipped line's note, answered, gives back the body (issue 9 item 1)
        assert expand(w.text, r.body, EID)[0] in (r.body, r.body + "\n"), r.source
    assert long_ones >= 2  # the 32,986-char Read and the 151,582-char git diff


def _offset(body: str, line: int) -> int:
    """Character offset where 1-based ``line`` starts (len(body) past the end)."""
    pos = 0
    for _ in range(line - 1):
        nl = body.find("\n", pos)
        if nl < 0:
            return len(body)
        pos = nl + 1
    return pos
