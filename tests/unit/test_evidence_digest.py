"""Closed-turn digests by shape (spec §3, issue 4 items 2 and 10): one test per shape rule and edge."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.context.evidence.digest import (
    DIGEST_CHARS,
    LINE_CHARS,
    body_text,
    detect_shape,
    digest,
    evidence_tag,
    line_count,
    recall_slice,
    select,
)
from vak_context.context.evidence.shapes import DIGEST_LINE_WIDTHS

EID = "5e" * 32


def content_of(d: str, body: str) -> str:
    """A digest without its tag; asserts the tag is there and exact."""
    tag = evidence_tag(EID, len(body))
    assert d.endswith("\n" + tag) or d == tag
    return d[: -len(tag)].removesuffix("\n")


def test_the_evidence_tag_format() -> None:
    assert evidence_tag("9f2", 14200) == "[evidence:9f2 — 14200 chars; call recall to expand]"


# ------------------------------------------------------------------ json


def test_json_object_digest_shows_keys_array_lengths_and_first_elements_in_full() -> None:
    body = json.dumps(
        {
            "reservation_id": "ZFA04Y",
            "flights": [{"origin": "SFO", "destination": "JFK", "price": 451}, {"origin": "JFK", "price": 1}],
            "passengers": [],
            "name": {"first_name": "Mia", "last_name": "Li"},
            "insurance": False,
        },
        indent=2,
    )
    assert detect_shape(body) == "json"
    assert content_of(digest(body, EID), body) == (
        "JSON object, 5 keys:\n"
        '  reservation_id: "ZFA04Y"\n'
        '  flights: array of 2; first in full: {"origin": "SFO", "destination": "JFK", "price": 451}\n'
        "  passengers: array of 0\n"
        "  name: object, 2 keys: first_name, last_name\n"
        "  insurance: false"
    )


def test_json_array_digest_shows_length_and_first_item_in_full() -> None:
    items = [{"flight_number": f"HAT{i:03d}", "seats": {"economy": i}} for i in range(250)]
    body = json.dumps(items)
    assert content_of(digest(body, EID), body) == (
        'JSON array of 250 items; first item in full:\n  {"flight_number": "HAT000", "seats": {"economy": 0}}'
    )


def test_a_json_digest_does_not_grow_with_the_body() -> None:
    small = json.dumps({"rows": [[1, 2]] * 3, "note": "x"})
    large = json.dumps({"rows": [[1, 2]] * 300_000, "note": "x"})
    d_small, d_large = content_of(digest(small, EID), small), content_of(digest(large, EID), large)
    assert d_small.replace("array of 3", "array of 300000") == d_large


def test_deeply_nested_json_is_digested_from_a_flat_scan() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    body = json.dumps({"a": 1, "tree": "PLACEHOLDER", "list": [1, 2, 3]}).replace('"PLACEHOLDER"', deep)
    assert detect_shape(body) == "json"
    text = content_of(digest(body, EID), body)
    assert text.startswith("JSON object, 3 keys (nested deeper than the parser goes")
    assert "  a: 1\n" in text and "  list: array of 3; first in full: 1" in text
    assert "  tree: array of 1; first in full: [[[" in text
    assert "more chars]" in text  # the 100,000-char first element follows the line rule
    assert max(len(line) for line in text.split("\n")) < LINE_CHARS + 100


def test_broken_json_that_looks_like_json_is_not_called_json() -> None:
    for body in (
        '{"user_id": "mia_li", "name": {"first": "Mia"',
        '[{"a": 1},, {"b": 2}]',
        "{not json at all}",
    ):
        assert detect_shape(body) == "text", body
        text = content_of(digest(body, EID), body)
        assert "JSON" not in text
    unbalanced_deep = "[" * 5000 + "]" * 4999
    assert detect_shape(unbalanced_deep) == "text"


def test_forcing_the_json_shape_on_text_falls_back_to_the_text_digest() -> None:
    body = "# Notes\n\nplain words\n"
    assert digest(body, EID, shape="json") == digest(body, EID, shape="text")


# ------------------------------------------------------------------ search


WEBSEARCH = (
    'Web search results for query: "mix_audit hex elixir setup"\n\n'
    'Links: [{"title":"GitHub - mirego/mix_audit","url":"https://github.com/mirego/mix_audit"},'
    '{"title":"mix_audit | Hex","url":"https://hex.pm/packages/mix_audit"}]\n\n'
    "Based on the search results, here is what I found: add {:mix_audit, ...} to deps.\n\n"
    "REMINDER: You MUST include the sources above in your response."
)


def test_a_web_search_digest_has_every_title_and_url_and_no_body() -> None:
    assert detect_shape(WEBSEARCH, tool_name="WebSearch") == "search"
    assert detect_shape(WEBSEARCH) == "search"  # the Links block alone says so
    text = content_of(digest(WEBSEARCH, EID, tool_name="WebSearch"), WEBSEARCH)
    assert text == (
        'search results for "mix_audit hex elixir setup": 2 results (titles and URLs; bodies left out)\n'
        "1. GitHub - mirego/mix_audit — https://github.com/mirego/mix_audit\n"
        "2. mix_audit | Hex — https://hex.pm/packages/mix_audit"
    )


def test_json_search_results_are_search_not_json() -> None:
    body = json.dumps(
        {
            "query": "noida weather",
            "results": [
                {
                    "title": "Noida forecast",
                    "url": "https://w.example/noida",
                    "content": "29.1°C and humid " * 50,
                },
                {"title": "IMD", "url": "https://imd.example", "content": "long text " * 80},
            ],
        }
    )
    assert detect_shape(body, tool_name="tavily_search") == "search"
    text = content_of(digest(body, EID, tool_input={"query": "weather in noida"}), body)
    assert text.splitlines() == [
        'search results for "weather in noida": 2 results (titles and URLs; bodies left out)',
        "1. Noida forecast — https://w.example/noida",
        "2. IMD — https://imd.example",
    ]
    assert "humid" not in text


def test_a_search_tool_returning_markdown_links_is_search() -> None:
    body = "Found:\n- [Credo docs](https://hexdocs.pm/credo) static analysis...\n- [Dialyxir](https://hex.pm/dialyxir)\n"
    assert detect_shape(body, tool_name="web_search") == "search"
    assert detect_shape(body, tool_name="WebFetch") == "text"  # a fetched page is text, not results
    text = content_of(digest(body, EID, tool_name="web_search"), body)
    assert "1. Credo docs — https://hexdocs.pm/credo" in text and "static analysis" not in text


# ------------------------------------------------------------------ text


MARKDOWN = (
    "# Setup guide\n\n"
    "Install the tools first.\nThen configure them.\n\n"
    "## Credo\n\nRun mix credo.\n\n"
    "```bash\n# not a heading, a shell comment\nmix deps.get\n```\n\n"
    "### Dialyxir\nmore text\n"
)


def test_a_markdown_digest_has_headings_first_paragraph_and_counts() -> None:
    assert detect_shape(MARKDOWN, tool_name="WebFetch") == "text"
    text = content_of(digest(MARKDOWN, EID), MARKDOWN)
    assert text == (
        f"text: {line_count(MARKDOWN)} lines, {len(MARKDOWN.encode())} bytes\n"
        "headings: 3\n# Setup guide\n## Credo\n### Dialyxir\n"
        "first paragraph (lines 3-4):\nInstall the tools first.\nThen configure them."
    )


def test_a_long_first_paragraph_shows_ten_lines_and_says_it_continues() -> None:
    body = "".join(f"sentence {i} of one long paragraph\n" for i in range(1, 41)) + "\nnext paragraph\n"
    text = content_of(digest(body, EID), body)
    assert "first paragraph (lines 1-10; it continues past line 10):" in text
    assert "sentence 10 of" in text and "sentence 11 of" not in text


def test_a_code_file_read_shows_its_definitions_not_comments() -> None:
    body = "".join(
        f"{n:6d}→{line}\n"
        for n, line in enumerate(
            [
                "import os",
                "",
                "# a comment",
                "class Store:",
                "    def get(self):",
                "        pass",
                "",
                "def main():",
            ],
            1,
        )
    )
    text = content_of(digest(body, EID, tool_name="Read", tool_input={"file_path": "/src/app.py"}), body)
    assert "definitions (.py file): 2" in text
    assert "     4→class Store:" in text and "     8→def main():" in text and "# a comment" not in text
    assert "first paragraph (line 1):\n     1→import os" in text


def test_a_single_short_paragraph_is_shown_whole() -> None:
    body = "Transfer successful"
    assert digest(body, EID) == "Transfer successful\n" + evidence_tag(EID, len(body))


def test_an_empty_result_has_a_digest_that_says_so() -> None:
    assert digest("", EID) == "empty result (0 lines, 0 bytes)\n" + evidence_tag(EID, 0)
    assert detect_shape("") == "text"


def test_a_huge_heading_is_quoted_by_its_start_and_what_continues() -> None:
    body = "# " + "h" * 5000 + "\n\nbody text\n"
    text = content_of(digest(body, EID), body)
    width = DIGEST_LINE_WIDTHS[0]
    assert "# " + "h" * (width - 2) + f" … [continues for {5002 - width} more chars]" in text
    assert text.endswith("first paragraph (line 3):\nbody text")


# ------------------------------------------------------------------ commands


def _output(n: int) -> str:
    return "".join(f"out {i}\n" for i in range(1, n + 1))


@pytest.mark.parametrize(
    ("body", "tool", "code"),
    [
        ("<returncode>1</returncode>\n<output>\n" + _output(30) + "</output>", "bash", 1),
        ("Exit code 2\n" + _output(30), "Bash", 2),
        (_output(30) + "\n[The command completed with exit code 0.]", "execute_bash", 0),
        (_output(30), "Bash", None),
    ],
)
def test_a_command_digest_has_the_exit_code_and_first_and_last_ten_lines(
    body: str, tool: str, code: int | None
) -> None:
    assert detect_shape(body, tool_name=tool) == "command"
    text = content_of(digest(body, EID, tool_name=tool), body)
    lines = text.split("\n")
    total = line_count(body)
    status = f"exit code {code}" if code is not None else "exit code not reported"
    assert lines[0].startswith(f"command output: {status}, {total} lines")
    assert lines[1:11] == [line.rstrip("\r") for line in body.split("\n")[:10]]
    marker = lines[11]
    assert marker.startswith(f"[… lines 11-{total - 10} omitted")
    omitted = recall_slice(body, EID, (11, total - 10))
    assert isinstance(omitted, str) and f"({len(omitted)} chars)" in marker
    assert lines[12:] == body.rstrip("\n").split("\n")[-10:]


def test_a_short_command_output_is_shown_whole_with_its_exit_code() -> None:
    body = "Exit code 128\nfatal: The current branch has no upstream branch.\n"
    assert detect_shape(body, tool_name="Bash", is_error=True) == "command"
    text = content_of(digest(body, EID, tool_name="Bash", is_error=True), body)
    assert (
        text
        == "command output: exit code 128, 2 lines, 64 bytes\nExit code 128\nfatal: The current branch has no upstream branch."
    )


# ------------------------------------------------------------------ errors


def test_errors_that_fit_are_verbatim() -> None:
    for body, flagged in (
        ("Error: flight HAT030 not available on date 2024-05-13", False),
        ("Pre-commit validation failed:\\n\\n[FORMAT] Code is not formatted.", True),
        ("Parameter 'command' is expected to be one of ['view', 'create'].", True),
        ('Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n' * 20, True),
    ):
        assert detect_shape(body, is_error=flagged) == "error"
        separator = "" if body.endswith("\n") else "\n"
        assert digest(body, EID, is_error=flagged) == body + separator + evidence_tag(EID, len(body))


def test_an_error_too_long_for_a_digest_shows_its_edges_and_names_the_rest() -> None:
    """Issue 9 item 2: an error is verbatim only while it fits in DIGEST_CHARS; a longer one shows its
    first and last lines and the exact recall range of the lines between."""
    body = "".join(f'Traceback {i}:\n  File "x.py", line {i}\nValueError: bad\n' for i in range(40))
    d = digest(body, EID, is_error=True)
    assert len(d) <= DIGEST_CHARS and d.endswith("\n" + evidence_tag(EID, len(body)))
    lines = content_of(d, body).split("\n")
    assert (
        lines[0] == f"error: 120 lines, {len(body)} chars, too long to show whole; its first and last lines:"
    )
    marker = next(line for line in lines if line.startswith("[… lines "))
    first, last = (int(x) for x in re.findall(r"lines (\d+)-(\d+) omitted", marker)[0])
    body_lines = body.split("\n")[:-1]
    assert lines[1:first] == body_lines[: first - 1]  # the first lines, whole
    assert lines[lines.index(marker) + 1 :] == body_lines[last:]  # the last lines, whole
    assert f"({len(select(body, EID, (first, last)))} chars)" in marker


def test_a_50_mb_single_line_error_digest_is_bounded() -> None:
    body = "Error: " + "y" * 50_000_000
    d = digest(body, EID, is_error=True)
    assert len(d) <= DIGEST_CHARS and d.endswith(evidence_tag(EID, len(body)))
    width = DIGEST_LINE_WIDTHS[0]
    assert d.split("\n")[:2] == [
        f"error: 1 line, {len(body)} chars, too long to show whole; its first and last lines:",
        body[:width] + f" … [continues for {len(body) - width} more chars]",
    ]


def test_a_long_unflagged_text_that_starts_with_error_is_not_an_error() -> None:
    log = "ERROR: first failure\n" + "".join(f"INFO step {i}\n" for i in range(100))
    assert detect_shape(log) == "text"


# ------------------------------------------------------------------ binary and bytes


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4


def test_binary_bytes_become_a_hex_dump_and_a_binary_digest() -> None:
    body = body_text(PNG, "binary")
    assert body.startswith("[binary: 1040 bytes, not UTF-8 text; looks like a PNG image; hex dump below")
    assert (
        body.split("\n")[1] == "00000000  89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52  |.PNG........IHDR|"
    )
    assert line_count(body) == 1 + 1040 // 16
    assert detect_shape(body) == "binary"
    text = content_of(digest(body, EID), body)
    assert "1040 bytes" in text and "PNG image" in text and "first row: 00000000  89 50" in text


def test_text_with_nul_characters_is_binary() -> None:
    body = "abc\x00def\n"
    assert detect_shape(body) == "binary"
    assert (
        content_of(digest(body, EID), body)
        == "binary-looking text: 8 chars, 1 lines, contains NUL characters"
    )


def test_body_text_shows_bytes_as_text_where_it_can() -> None:
    assert body_text("naïve ✓\r\n".encode(), "utf-8") == "naïve ✓\r\n"
    assert body_text(b"plain", "binary") == "plain"  # UTF-8 bytes are text whatever the label
    assert body_text(b"caf\xe9 au lait\n", "binary") == "caf\\xe9 au lait\n"
    assert body_text(b"caf\xe9", "latin-1") == "café"
    assert body_text(b"caf\xe9", "no-such-codec") == "caf\\xe9"
    assert body_text(b"", "binary") == ""
    assert body_text(b"\x00\x01\x02", "utf-8") == "\x00\x01\x02"  # valid UTF-8 stays byte for byte
    assert body_text(b"\x00\xff\x02", "utf-8").startswith("[binary: 3 bytes")  # not UTF-8, and has NUL
    assert body_text(bytes([0x80, 0x81, 0x82, 0x41]), "utf-8").startswith("[binary: 4 bytes")  # mostly bad


@settings(max_examples=300, deadline=None)
@given(
    blob=st.binary(max_size=400),
    encoding=st.sampled_from(
        ["utf-8", "binary", "latin-1", "bogus", "utf-16", "idna", "rot13", "hex", "base64"]
    ),
)
def test_body_text_never_raises_and_always_gives_encodable_text(blob: bytes, encoding: str) -> None:
    text = body_text(blob, encoding)
    text.encode("utf-8")
    d = digest(text, EID)
    assert d.endswith(evidence_tag(EID, len(text)))


# ------------------------------------------------------------------ size


@pytest.mark.slow
def test_digests_of_a_64_mib_result_stay_small() -> None:
    size = 64 << 20
    text_body = ("# Heading\n\n" + "A paragraph line of prose.\n" * 5 + "\n") * (size // 160)
    cmd_body = "Exit code 1\n" + "compiling module 0000\n" * (size // 22)
    for body, tool in ((text_body, ""), (cmd_body, "Bash")):
        d = digest(body, EID, tool_name=tool)
        assert d.endswith(evidence_tag(EID, len(body)))
        assert len(d) <= DIGEST_CHARS
    assert detect_shape(cmd_body, tool_name="Bash") == "command"


def test_a_closed_turns_json_result_is_parsed_once_not_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9 item 2: ``vak_context.context.history.render.evidence_info`` (every closed-turn result) detects the shape and
    digests in one pass, so a large JSON body goes through the JSON parser once, not twice."""
    from vak_context.context.evidence.shapes import jsonscan
    from vak_context.context.history.render import evidence_info
    from vak_context.events.payloads import EvidenceBody

    parsed: list[int] = []
    real = jsonscan.parse_json

    def counting(body: str) -> object:
        parsed.append(len(body))
        return real(body)

    monkeypatch.setattr(jsonscan, "parse_json", counting)
    blob = json.dumps({"rows": [[i, str(i)] for i in range(50_000)], "note": "x"}).encode()
    meta = EvidenceBody(tool_use_id="t", tool_name="get_rows", chars=len(blob), bytes=len(blob))
    info = evidence_info("ab" * 32, meta, blob)
    assert info.shape == "json" and info.digest.startswith("JSON object, 2 keys:")
    assert parsed == [len(blob)]
