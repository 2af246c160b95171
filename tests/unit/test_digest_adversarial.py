"""Digests of adversarial bodies stay bounded (issue 9 item 2).

A digest must be at most ``DIGEST_CHARS`` characters whatever the body: one huge line, deep
nesting, a million keys, invalid UTF-8, NUL bytes, ANSI escapes, a million newlines, a CSV with
100,000 columns. It must still end with its evidence tag, and no library error (a ``RecursionError``
from ``json.loads``, a ``UnicodeError``) may escape. ``tests/fakes/adversarial_bodies.py`` builds each
body at a given size; ``bench/evidence.py`` times the same bodies at the issue's sizes (timing is
the bench's job, not a test's).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fakes.adversarial_bodies import ADVERSARIAL, Case, adversarial
from vak_context.context.evidence import shapes as digests
from vak_context.context.evidence.digest import (
    DIGEST_CHARS,
    SHAPES,
    body_text,
    detect_shape,
    digest,
    evidence_tag,
)


@functools.cache
def _case(kind: str) -> Case:
    return adversarial(kind, ADVERSARIAL[kind][2])


_KINDS = sorted(ADVERSARIAL)
_IDS = st.sampled_from(["5e" * 32, "0123456789ab", "x"])


def _check(case: Case, evidence_id: str, shape: str | None) -> str:
    """The digest of ``case``; asserts the bound, the tag, and that it is text a request can carry."""
    d = digest(
        case.body,
        evidence_id,
        tool_name=case.tool_name,
        is_error=case.is_error,
        tool_input=case.tool_input,
        shape=shape,  # type: ignore[arg-type]
    )
    assert len(d) <= DIGEST_CHARS, (len(d), d[:300])
    assert d.endswith(evidence_tag(evidence_id, len(case.body)))
    d.encode("utf-8")  # no lone surrogates: bodies come from body_text, which never makes them
    return d


@pytest.mark.parametrize("kind", _KINDS)
def test_every_adversarial_body_has_a_bounded_digest_that_ends_with_its_tag(kind: str) -> None:
    """Each adversarial body, in the shape detection gives it, digests to at most DIGEST_CHARS
    characters ending with its evidence tag, and raises nothing (no RecursionError, no UnicodeError)."""
    _check(_case(kind), "5e" * 32, None)


# the million-key body is parsed in every example that draws it: the test above covers it once
_FORCEABLE = [k for k in _KINDS if k != "a million keys"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(_FORCEABLE), evidence_id=_IDS, shape=st.sampled_from(SHAPES))
@example(kind="100k nested arrays inside an object", evidence_id="5e" * 32, shape="json")
@example(kind="a million newlines", evidence_id="5e" * 32, shape="command")
@example(kind="many markdown links, no spaces", evidence_id="5e" * 32, shape="search")
@example(kind="one huge line", evidence_id="x", shape="error")
def test_every_adversarial_body_forced_into_any_shape_is_bounded(
    kind: str, evidence_id: str, shape: str
) -> None:
    """Property: whatever shape a caller forces on an adversarial body, and whatever the id's length,
    the digest stays within DIGEST_CHARS and ends with its tag."""
    _check(_case(kind), evidence_id, shape)


_PIECES = st.sampled_from(
    [
        "\n",
        "\r\n",
        "\x00",
        "\x1b[31m",
        "\\x",
        "[",
        "]",
        "{",
        '"',
        "\\",
        ":",
        ",",
        "# ",
        "def ",
        "Error: ",
        "Links: ",
        "[a](http://",
        "title: t\nurl: u\n",
        "Exit code 1\n",
        "<returncode>0</returncode>",
        "x" * 2_500,
        "é",
        "\U0001f600",
    ]
)


@st.composite
def grown_bodies(draw: st.DrawFn) -> str:
    """A few adversarial pieces, repeated to a large body: JSON fragments, escapes, markers of every
    shape, control characters, long runs."""
    unit = "".join(draw(st.lists(_PIECES, min_size=1, max_size=8)))
    body = unit * draw(st.integers(1, 200_000 // len(unit) + 1))
    return draw(st.sampled_from(["", "[", "{", "Error: ", "Exit code 2\n"])) + body


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=grown_bodies(),
    tool_name=st.sampled_from(["", "bash", "web_search", "read_file"]),
    is_error=st.booleans(),
    shape=st.none() | st.sampled_from(SHAPES),
)
def test_digests_of_grown_adversarial_bodies_are_bounded(
    body: str, tool_name: str, is_error: bool, shape: str | None
) -> None:
    """Property over bodies grown from adversarial pieces: the digest is bounded and ends with its tag,
    whatever shape is detected or forced, and detection itself raises nothing."""
    case = Case(body, tool_name, is_error, {"file_path": "notes.md"} if tool_name == "read_file" else {})
    assert detect_shape(body, tool_name=tool_name, is_error=is_error) in SHAPES
    _check(case, "5e" * 32, shape)


def test_invalid_utf8_bytes_digest_as_text_or_binary_within_the_bound() -> None:
    """Bytes that are not UTF-8 reach the digest through body_text, never raising."""
    for blob in (
        b"\xff" * 100_000,
        b"caf\xe9\n" * 100_000,
        bytes(range(256)) * 4_000,
        b"\xed\xa0\x80" * 1000,
    ):
        text = body_text(blob, "utf-8")
        _check(Case(text), "0123456789ab", None)


def test_the_one_cap_holds_even_when_a_shape_overflows() -> None:
    """``digests.capped`` is the last step of every digest: content over its budget is cut at a line
    and says so, within the budget."""
    content = "\n".join(f"line {i}" for i in range(10_000))
    out = digests.capped(content, 500)
    assert len(out) <= 500 and out.startswith("line 0\nline 1\n")
    assert out.endswith(f"digests stay under {DIGEST_CHARS} chars …]")
    assert digests.capped("short", 500) == "short"
