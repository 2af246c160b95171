"""The fast canonical encoders give exactly the bytes (or the error) of the reference encoder.

``canonical.encode_plain_object`` (pydantic-core's compiled writer) and the flat-model path of
``Mapper.encode_payload`` are used on the append hot path; ``canonical.encode`` is the definition.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, PlainSerializer, computed_field, field_serializer

from vak_context.errors import InvalidUtf8, NonCanonicalValue
from vak_context.events import canonical
from vak_context.events.envelope import Mapper, flat_keys
from vak_context.events.payloads import (
    EvidenceBody,
    IntentNote,
    Nudge,
    PresentationFeedback,
    ResetWithHandoff,
    Thread,
    ToolResult,
    WorkContract,
)

# Text that stresses the escapes: every control character, quote, backslash, DEL, the line and
# paragraph separators, a BOM, astral characters, and lone surrogates (not UTF-8: rejected).
adversarial_text = st.text(
    alphabet=st.sampled_from([chr(i) for i in range(0x20)]
                             + ['"', "\\", "/", "\x7f", "\u2028", "\u2029", "\ufeff", "é", "😀", "a", "Z", " "])
    | st.characters(), max_size=40,
) | st.sampled_from(["x\ud800y", "\udfff", "ok"])
huge_ints = st.integers() | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**400, -(10**400)])
plain_values = (adversarial_text | huge_ints | st.booleans() | st.none()
                | st.lists(adversarial_text, max_size=4) | st.tuples(adversarial_text, adversarial_text))
other_values = st.floats(allow_nan=True, allow_infinity=True) | st.just(-0.0) | st.binary(max_size=4) \
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2) | st.lists(st.integers(), max_size=2)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@given(st.dictionaries(adversarial_text, plain_values | other_values, max_size=6), st.booleans())
@settings(max_examples=400)
def test_plain_object_bytes_equal_the_canonical_encoder(obj: dict[str, Any], sort: bool) -> None:
    """Where encode_plain_object answers, its bytes are encode()'s; where encode() raises, it declines."""
    if sort:
        obj = dict(sorted(obj.items()))
    fast = canonical.encode_plain_object(obj)
    try:
        expected = canonical.encode(obj)
    except (InvalidUtf8, NonCanonicalValue):
        assert fast is None
        return
    assert fast is None or fast == expected


@given(st.dictionaries(st.text(max_size=8).filter(lambda k: not any(0xD800 <= ord(c) < 0xE000 for c in k)),
                       plain_values, max_size=6))
@settings(max_examples=300)
def test_plain_object_answers_for_every_sorted_plain_object(obj: dict[str, Any]) -> None:
    """On sorted keys and plain values it applies (declining only for a lone surrogate) and matches."""
    obj = dict(sorted(obj.items()))
    fast = canonical.encode_plain_object(obj)
    try:
        expected = canonical.encode(obj)
    except InvalidUtf8:
        assert fast is None
        return
    assert fast == expected


@pytest.mark.parametrize("value", [_nested(200), float("nan"), float("inf"), -0.0, 1.5, {"a": 1}, b"x", True])
def test_plain_object_declines_what_it_does_not_cover(value: Any) -> None:
    """Deep nesting, floats (NaN, -0.0), nested objects and bytes go to the reference path."""
    if value is True:  # bool is plain: the control case, answered and equal
        assert canonical.encode_plain_object({"v": value}) == canonical.encode({"v": value})
        return
    assert canonical.encode_plain_object({"v": value}) is None


text = st.text(max_size=30) | st.sampled_from(["a\ud800", "\x00\x1f\"\\", "😀\u2028"])
hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
payloads = st.one_of(
    st.builds(Nudge, tag=text, text=text),
    st.builds(IntentNote, text=text),
    st.builds(Thread, items=st.tuples(text, text)),
    st.builds(WorkContract, text=text, active=st.booleans()),
    st.builds(ToolResult, tool_use_id=text, tool_name=text, content=text, is_error=st.booleans(),
              evidence_id=st.none() | hex64, windowed=st.booleans()),
    st.builds(EvidenceBody, tool_use_id=text, tool_name=text, encoding=st.sampled_from(["utf-8", "binary"]),
              chars=huge_ints.filter(lambda i: i >= 0), bytes=st.integers(0, 2**70)),
    st.builds(ResetWithHandoff, handoff=text, last_turn_id=st.none() | hex64, carried_evidence=st.tuples(hex64),
              reason=text, model=st.none() | text),
    st.builds(PresentationFeedback, presentation_id=hex64,
              action=st.sampled_from(["dismissed", "pinned", "helpful", "not_helpful", "corrected"]), note=text),
)


@given(payloads)
@settings(max_examples=300)
def test_payload_bytes_equal_the_reference_encoding(model: BaseModel) -> None:
    """Mapper.encode_payload (flat-model fast path) gives encode(model_dump(mode='json')), or the same error."""
    try:
        expected = canonical.encode(model.model_dump(mode="json"))
    except InvalidUtf8:
        with pytest.raises(InvalidUtf8):
            Mapper().encode_payload(model)
        return
    assert Mapper().encode_payload(model) == (model.kind, expected)  # type: ignore[attr-defined]


def test_constructed_model_with_odd_values_takes_the_reference_path() -> None:
    """A model made without validation can hold a float in a str field: the bytes are still the reference's."""
    odd = Nudge.model_construct(tag=1.5, text="x")
    with pytest.warns(UserWarning):  # pydantic warns that the value is not the field's type
        expected = canonical.encode(odd.model_dump(mode="json"))
    with pytest.warns(UserWarning):
        assert Mapper().encode_payload(odd)[1] == expected


class _WithFloat(BaseModel):
    x: float


class _WithSerializer(BaseModel):
    x: str

    @field_serializer("x")
    def _upper(self, v: str) -> str:
        return v.upper()


class _WithComputed(BaseModel):
    x: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def y(self) -> str:
        return self.x


class _WithAlias(BaseModel):
    x: str = Field(serialization_alias="why")


class _WithExcluded(BaseModel):
    x: str = Field(exclude=True)


class _WithAnnotatedSerializer(BaseModel):
    x: Annotated[str, PlainSerializer(lambda v: v.upper())]


class _Nested(BaseModel):
    inner: _WithFloat


class _Flat(BaseModel):
    b: tuple[str, ...]
    a: int | None
    c: Annotated[str, Field(pattern="^x")] | None


@pytest.mark.parametrize("cls", [_WithFloat, _WithSerializer, _WithComputed, _WithAlias, _WithExcluded,
                                 _WithAnnotatedSerializer, _Nested])
def test_models_whose_dump_is_not_their_fields_are_not_flat(cls: type) -> None:
    """Floats, serializers, computed fields, aliases, exclusions and nested models keep the reference path."""
    assert flat_keys(cls) is None


def test_flat_model_keys_are_sorted() -> None:
    """A flat model's keys come back sorted by code point, so its object is written in canonical order."""
    assert flat_keys(_Flat) == ("a", "b", "c")
    assert flat_keys(Nudge) == ("kind", "tag", "text")
