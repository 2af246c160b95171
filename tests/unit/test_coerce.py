"""One lenient integer reading (issue 22): ``vak_context.coerce.int_or_none``, used by the provider adapters
and by recall, has one documented behaviour and never raises."""

from __future__ import annotations

import math
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vak_context.coerce import int_or_none

WHITESPACE = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0\u2003", max_size=3)


@given(st.integers(), WHITESPACE, WHITESPACE)
def test_an_int_and_its_decimal_text_read_as_that_int(n: int, before: str, after: str) -> None:
    """Negative numbers included, and whatever whitespace surrounds the text."""
    assert int_or_none(n) == n
    assert int_or_none(f"{before}{n}{after}") == n


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_an_integral_float_reads_as_its_int(n: int) -> None:
    assert int_or_none(float(n)) == n


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_reads_only_when_it_is_a_finite_whole_number(x: float) -> None:
    got = int_or_none(x)
    if math.isfinite(x) and x.is_integer():
        assert got == int(x)
    else:
        assert got is None


@given(st.text())
def test_any_text_reads_as_none_or_the_ascii_integer_it_spells(text: str) -> None:
    """Never a ValueError (``"²".isdigit()`` is True, and ``int("²")`` raises); only ASCII digits count."""
    got = int_or_none(text)
    if re.fullmatch(r"-?[0-9]+", text.strip()):
        assert got == int(text.strip())
    else:
        assert got is None


@given(st.one_of(st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.binary(max_size=4)))
def test_other_types_and_bools_read_as_none(value: Any) -> None:
    assert int_or_none(value) is None


def test_the_documented_edge_cases() -> None:
    cases = {" -12\n": -12, "007": 7, "+3": None, "3.0": None, "1e3": None, "²": None, "١٢": None, "": None,
             "-": None, "- 1": None, 3.5: None, -0.0: 0, True: None}
    assert {k: int_or_none(k) for k in cases} == cases
