"""The tool surface: fixed core order, a sorted catalogue that depends on the admitted set only,
find_tools ranking, and the one-source-per-fact invariant."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.history.cards import card_tools
from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import (
    FIND_TOOLS,
    Surface,
    ToolDecl,
    find_tools_result,
    first_sentence,
    parse_find_tools_args,
    uniqueness_violations,
)
from vak_context.errors import InvalidInput


def _deferred(name: str, description: str, observes: bool = False) -> ToolDecl:
    return ToolDecl(ToolSpec(name=name, description=description), observes=observes)


DEFERRED = [
    _deferred("web_search", "Search the web for current pages. Returns titles and snippets.", observes=True),
    _deferred("send_email", "Send an email message to a recipient."),
    _deferred("run_command", "Run a shell command in the workspace. Returns its output.", observes=True),
    _deferred("calendar_create", "Create a calendar event with a title and time."),
]


def _core() -> list[ToolDecl]:
    core = [ToolDecl(RECALL_TOOL, always_loaded=True)]
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    core += [ToolDecl(s, always_loaded=True) for s in card_tools()]
    return core


def test_core_order_is_fixed_and_find_tools_follows_recall() -> None:
    """The request's tools are the core schemas in the order given, find_tools right after recall."""
    surface = Surface.build([*_core(), *DEFERRED])
    names = [t.name for t in surface.schemas]
    assert names[:5] == ["recall", "find_tools", "read_file", "list_dir", "grep"]
    assert all(n.startswith("emit_") for n in names[5:])
    assert FIND_TOOLS in surface.schemas


@settings(max_examples=50, deadline=None)
@given(st.permutations(DEFERRED))
def test_catalogue_depends_on_the_admitted_set_only(order: list[ToolDecl]) -> None:
    """Whatever order deferred tools are admitted in, the catalogue is byte-identical and sorted."""
    surface = Surface.build([*_core(), *order])
    assert surface.catalogue() == Surface.build([*_core(), *DEFERRED]).catalogue()
    lines = surface.catalogue().splitlines()[1:]
    assert lines == sorted(lines)
    assert lines[0] == "- calendar_create — Create a calendar event with a title and time."


def test_find_tools_ranks_by_name_and_description() -> None:
    """find_tools returns the matching deferred tools best first, an exact name first, nothing unrelated."""
    surface = Surface.build([*_core(), *DEFERRED])
    assert surface.find("search the web")[0].name == "web_search"
    assert surface.find("send an email")[0].name == "send_email"
    assert surface.find("calendar_create")[0].name == "calendar_create"
    assert surface.find("zebra giraffe") == ()
    assert all(t.name not in {"recall", "read_file"} for t in surface.find("read a file recall"))


def test_find_tools_result_carries_full_schemas() -> None:
    """The result names each found tool with its full schema as JSON the model can use."""
    surface = Surface.build([*_core(), *DEFERRED])
    found = surface.find("email")
    text = find_tools_result(found, "email")
    record = json.loads(text.splitlines()[1])
    assert record == {"name": "send_email", "description": "Send an email message to a recipient.",
                      "parameters": {"type": "object", "properties": {}}}
    assert "no tool matches" in find_tools_result((), "x")
    assert parse_find_tools_args({"query": "  mail "}) == "mail"
    assert parse_find_tools_args({"query": 3}) is None and parse_find_tools_args({}) is None


def test_observation_is_declared_not_guessed() -> None:
    """observes() reads the declaration: a tool named like a search that declares nothing does not observe."""
    surface = Surface.build([*_core(), *DEFERRED, _deferred("search_memory", "Search notes.")])
    assert surface.observes("web_search") and surface.observes("read_file")
    assert not surface.observes("search_memory") and not surface.observes("recall")
    assert not surface.observes("no_such_tool")


def test_a_tool_admitted_twice_is_refused() -> None:
    """Two tools with one name are a typed error naming the tool."""
    with pytest.raises(InvalidInput, match="web_search"):
        Surface.build([*DEFERRED, DEFERRED[0]])


def test_uniqueness_invariant() -> None:
    """No tool name twice across schemas, catalogue and system prompt; each violation is named."""
    surface = Surface.build([*_core(), *DEFERRED])
    system = "You are a careful agent.\n\n" + surface.catalogue()
    assert uniqueness_violations(system, surface.schemas, surface.catalogue()) == []
    bad = system + "\nAlways call web_search first."
    assert uniqueness_violations(bad, surface.schemas, surface.catalogue()) == [
        "web_search: named in the system prompt outside the catalogue"]
    twice = (*surface.schemas, surface.schemas[0])
    assert "recall: schema listed twice" in uniqueness_violations(system, twice, surface.catalogue())


def test_first_sentence() -> None:
    """The catalogue line keeps one sentence on one line."""
    assert first_sentence("Do a thing.  Then more.") == "Do a thing."
    assert first_sentence("no stop\nat all") == "no stop at all"
    assert first_sentence("Version 2.5 is used. Yes.") == "Version 2.5 is used."
