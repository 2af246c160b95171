"""The two registries of issue 13 item 5: recorded-session formats (``vak_context.importers.registry``) and
digest shapes (``vak_context.context.evidence.shapes``).

Every registered format sniffs its own fixture, and no other format's sniff claims it: each fixture
is claimed by exactly one sniff. Detection asks the sniffs in the registry's fixed order and stops at
the first claim. Every digest shape is registered, and each of its claims in the detection order is
the first to claim its fixture, so detection selects that shape for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.recordings import CHAT, SAMPLES
from vak_context.context.evidence import shapes as digest_shapes
from vak_context.context.evidence.bodytext import body_text
from vak_context.context.evidence.digest import shaped_digest
from vak_context.context.evidence.shapes import DETECTION, SHAPES, Analysis
from vak_context.importers import registry
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.reading import read_document

# ------------------------------------------------------------------ formats

# The malformed-import tests' valid recordings (one per format, openai-chat as JSON and as JSONL),
# and the three other layouts openai-chat reads.
FORMAT_FIXTURES: list[tuple[str, str, Any]] = [(s.fmt, s.name, s.doc) for s in SAMPLES] + [
    ("openai-chat", "object.json", {"messages": CHAT}),
    ("openai-chat", "sessions.json", [{"messages": CHAT}, {"messages": CHAT[:2]}]),
    ("openai-chat", "sessions.jsonl", [{"messages": CHAT}, {"messages": CHAT[:2]}]),
]

# The real recordings in ../shared/data/trajectories, by the format their README gives them.
RECORDED = {
    "spotter__fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl": "claude-code",
    "spotter__subagent.jsonl": "claude-code",
    "OpenHands__output.jsonl": "openhands",
    "tau-bench__gpt-4o-airline.json": "tau-bench",
    "mini-swe-agent__django__django-15629.traj.json": "mini-swe-agent",
    "SWE-agent__pydicom__pydicom-1458.traj": "swe-agent",
}


def _written(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(row) + "\n" for row in doc), encoding="utf-8")
    else:
        path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _claimants(doc: Document) -> list[str]:
    return [fmt.name for fmt in registry.ORDER if fmt.sniff(doc)]


def test_every_registered_format_has_a_fixture_and_every_fixture_a_registered_format() -> None:
    """The registry holds exactly the formats the fixtures cover, each under its own name, once; the
    real recordings are all in registered formats (there is no real openai-chat recording)."""
    assert {fmt for fmt, _, _ in FORMAT_FIXTURES} == set(registry.REGISTRY)
    assert set(RECORDED.values()) == set(registry.REGISTRY) - {"openai-chat"}
    assert all(registry.REGISTRY[name].name == name for name in registry.REGISTRY)
    assert len(registry.ORDER) == len(registry.REGISTRY) == len(registry.FORMATS)


@pytest.mark.parametrize(("fmt", "name", "doc"), FORMAT_FIXTURES, ids=[n for _, n, _ in FORMAT_FIXTURES])
def test_a_fixture_is_claimed_by_its_own_format_and_by_no_other(
    tmp_path: Path, fmt: str, name: str, doc: Any
) -> None:
    """Of all the registered sniffs, exactly the fixture's own format's claims it, and detection picks it."""
    document, _ = read_document(_written(tmp_path, name, doc))
    assert _claimants(document) == [fmt]
    detected = registry.detect(document)
    assert detected is not None and detected.name == fmt


@pytest.mark.parametrize("file_name", sorted(RECORDED))
def test_a_real_recording_is_claimed_by_its_own_format_and_by_no_other(
    trajectories: Path, file_name: str
) -> None:
    """Each real recorded session is claimed by the one sniff of the format its README names."""
    document, _ = read_document(trajectories / file_name)
    assert _claimants(document) == [RECORDED[file_name]]


def test_detection_asks_the_sniffs_in_registry_order_and_stops_at_the_first_claim(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``detect`` asks each format's sniff once, in ``ORDER``: all of them for a file none claims,
    and only up to the claiming one for a file one claims."""
    asked: list[str] = []

    def logged(fmt: ImportFormat) -> ImportFormat:
        def sniff(doc: Document) -> bool:
            asked.append(fmt.name)
            return fmt.sniff(doc)

        return ImportFormat(fmt.name, sniff, fmt.parse)

    monkeypatch.setattr(registry, "ORDER", tuple(logged(f) for f in registry.ORDER))
    names = [f.name for f in registry.ORDER]

    nobody, _ = read_document(_written(tmp_path, "other.json", {"unrelated": [1, 2]}))
    assert registry.detect(nobody) is None
    assert asked == names

    asked.clear()
    tau = next(doc for fmt, _, doc in FORMAT_FIXTURES if fmt == "tau-bench")
    document, _ = read_document(_written(tmp_path, "tau.json", tau))
    detected = registry.detect(document)
    assert detected is not None and detected.name == "tau-bench"
    assert asked == names[: names.index("tau-bench") + 1]


# ------------------------------------------------------------------ digest shapes


@dataclass(frozen=True)
class ShapeFixture:
    rule: int  # the index in DETECTION of the claim that must select it
    body: str
    tool_name: str = ""
    is_error: bool = False
    tool_input: dict[str, Any] = field(default_factory=dict)


SHAPE_FIXTURES: dict[str, ShapeFixture] = {
    "hex dump": ShapeFixture(0, body_text(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"), "Read"),
    "NUL characters": ShapeFixture(0, "abc\x00def\n", "Read"),
    "failed shell command": ShapeFixture(1, "Exit code 2\nls: cannot access 'x'\n", "Bash", is_error=True),
    "error": ShapeFixture(2, "Error: no such file: notes.txt", "Read"),
    "JSON search results": ShapeFixture(
        3, json.dumps({"results": [{"title": "Lisbon", "url": "https://example.org/lisbon"}]}), "fetch"
    ),
    "JSON": ShapeFixture(4, json.dumps({"city": "Porto", "temps": [17, 18]}), "weather"),
    "text search results": ShapeFixture(
        5, 'Links: [{"title": "Porto", "url": "https://example.org/porto"}]\n', "WebSearch"
    ),
    "shell output": ShapeFixture(6, "a.txt\nb.txt\n", "execute_bash"),
    "document": ShapeFixture(
        7, "# Notes\n\nA paragraph of prose.\n", "Read", tool_input={"file_path": "notes.md"}
    ),
}


def test_every_digest_shape_is_registered_and_detectable() -> None:
    """The registry holds each shape of ``Shape`` under its own name, and each has a claim in DETECTION."""
    assert set(digest_shapes.REGISTRY) == set(SHAPES)
    assert all(digest_shapes.REGISTRY[name].name == name for name in SHAPES)
    assert {shape for shape, _ in DETECTION} == set(SHAPES)
    assert DETECTION[-1][0] == "text"  # text takes whatever no other shape claims


def test_every_detection_claim_has_a_fixture() -> None:
    """Each claim in the detection order is exercised by a fixture below."""
    assert {f.rule for f in SHAPE_FIXTURES.values()} == set(range(len(DETECTION)))


def _first_claim(fixture: ShapeFixture) -> int:
    claims: list[Callable[[Analysis], bool]] = [claim for _, claim in DETECTION]
    seen = Analysis(fixture.body, fixture.tool_name, fixture.is_error, dict(fixture.tool_input))
    return next(i for i, claim in enumerate(claims) if claim(seen))


@pytest.mark.parametrize("name", sorted(SHAPE_FIXTURES))
def test_a_shape_fixture_is_selected_by_its_claim(name: str) -> None:
    """The first claim in DETECTION to claim the fixture is the one it was written for, and
    ``shaped_digest`` selects that claim's shape and renders it with that shape's registered renderer."""
    fixture = SHAPE_FIXTURES[name]
    assert _first_claim(fixture) == fixture.rule
    expected = DETECTION[fixture.rule][0]
    shape, text = shaped_digest(
        fixture.body,
        "e1",
        tool_name=fixture.tool_name,
        is_error=fixture.is_error,
        tool_input=fixture.tool_input,
    )
    assert shape == expected
    seen = Analysis(fixture.body, fixture.tool_name, fixture.is_error, dict(fixture.tool_input))
    assert text.startswith(digest_shapes.REGISTRY[expected].render(seen, "e1", 1_000))
