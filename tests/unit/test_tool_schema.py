"""A tool's schema from its type hints and docstring (golden), or given explicitly; what is refused."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest

from vak_context.agent.tools import ToolRegistry, encode_result, tool
from vak_context.errors import InvalidInput


def search(query: str, limit: int = 5, fresh: bool = False, site: str | None = None,
           kinds: list[str] | None = None, order: Literal["new", "best"] = "best", score: float = 0.5,
           filters: dict[str, int] | None = None, note: Annotated[str, "a note kept with the search"] = "") -> str:
    """Search the web for pages. Returns titles and links.

    The second paragraph is not part of the description.

    Args:
        query: what to search for
        limit: how many results to return,
            at most 20
        fresh: only pages from today
        site (str): one site to search
        kinds: the page kinds to keep
        order: newest or best first
        score: the lowest score kept
        filters: field -> minimum value

    Returns:
        The results, one a line.
    """
    return query


GOLDEN = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to search for"},
        "limit": {"type": "integer", "description": "how many results to return, at most 20", "default": 5},
        "fresh": {"type": "boolean", "description": "only pages from today", "default": False},
        "site": {"type": ["string", "null"], "description": "one site to search", "default": None},
        "kinds": {"type": ["array", "null"], "items": {"type": "string"}, "description": "the page kinds to keep", "default": None},
        "order": {"type": "string", "enum": ["new", "best"], "description": "newest or best first", "default": "best"},
        "score": {"type": "number", "description": "the lowest score kept", "default": 0.5},
        "filters": {"type": ["object", "null"], "additionalProperties": {"type": "integer"}, "description": "field -> minimum value", "default": None},
        "note": {"type": "string", "description": "a note kept with the search", "default": ""},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def test_a_schema_from_hints_and_a_google_docstring_is_the_golden_one() -> None:
    registered = tool(search, read_only=True, observes=True, deferred=True)
    assert registered.decl.spec.input_schema == GOLDEN
    assert registered.decl.spec.description == "Search the web for pages. Returns titles and links."
    assert (registered.decl.read_only, registered.decl.observes, registered.decl.always_loaded) == (True, True, False)


def test_numpy_style_parameters_describe_the_parameters() -> None:
    def convert(amount: float, unit: str = "m") -> float:
        """Convert a length.

        Parameters
        ----------
        amount : float
            the length to convert
        unit : str
            its unit

        Returns
        -------
        float
        """
        return amount

    props = tool(convert).decl.spec.input_schema["properties"]
    assert props == {"amount": {"type": "number", "description": "the length to convert"},
                     "unit": {"type": "string", "description": "its unit", "default": "m"}}


def test_an_explicit_schema_and_description_are_used_as_given() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    registry = ToolRegistry()

    @registry.tool(name="weather_now", description="The weather in a city now.", schema=schema, observes=True)
    def weather(**arguments: Any) -> dict[str, Any]:
        return {"city": arguments["city"], "temp_c": 21}

    decl = registry.decls()[0]
    assert decl.spec.input_schema == schema and decl.spec.description == "The weather in a city now."
    assert decl.name == "weather_now" and decl.observes and decl.always_loaded and not decl.read_only


def test_what_has_no_schema_is_refused_naming_the_parameter() -> None:
    def bad(p: complex) -> str:
        """Take a point."""
        return ""

    def unhinted(x) -> str:  # type: ignore[no-untyped-def]
        """No hint."""
        return ""

    def undocumented(x: int) -> str:
        return ""

    with pytest.raises(InvalidInput, match=r"parameter 'p'.*pass schema="):
        tool(bad)
    with pytest.raises(InvalidInput, match="'x' has no type hint"):
        tool(unhinted)
    with pytest.raises(InvalidInput, match="no description"):
        tool(undocumented)
    registry = ToolRegistry([tool(search)])
    with pytest.raises(InvalidInput, match="registered twice"):
        registry.register(search)


def test_non_str_results_are_json_encoded_or_str() -> None:
    assert encode_result("plain") == "plain"
    assert encode_result({"a": [1, 2], "é": None}) == '{"a": [1, 2], "é": null}'
    assert encode_result((1, 2.5, True)) == "[1, 2.5, true]"
    assert encode_result(None) == "null"
    assert encode_result({1, 2}) in ("{1, 2}", "{2, 1}")
