"""The event model: every kind validates and round-trips; upcasters read older entries."""

from __future__ import annotations

from typing import Any

import pytest

from vak_context.errors import InvalidPayload, UnknownKind
from vak_context.events import canonical
from vak_context.events.envelope import CURRENT_VERSION, Mapper, stored_entry
from vak_context.events.payloads import KINDS, PAYLOAD_ADAPTER, Directive, ImageBlock
from vak_context.sessions.generator import generate_session

SPEC_KINDS = {
    "directive", "assistant_step", "tool_result", "evidence_body", "receipt", "presentation", "turn_card",
    "compaction", "activity", "capacity_profile", "reset_handoff", "nudge", "intent_note", "thread",
    "work_contract", "presentation_feedback", "presentation_selection",
}


def test_every_kind_the_spec_names_is_in_the_union() -> None:
    assert SPEC_KINDS <= set(KINDS)


def test_generated_session_covers_every_kind_and_round_trips() -> None:
    m = Mapper()
    session = generate_session(seed=3, turns=6)
    seen = set()
    for i, (payload, blob) in enumerate(session.items):
        e = m.entry(payload, session="s", seq=i, parent=None, time_us=i, blob=blob)
        back = m.payload_of(e)
        assert back == payload
        assert canonical.encode(back.model_dump(mode="json")) == e.payload
        seen.add(e.kind)
    assert SPEC_KINDS <= seen


def test_models_are_frozen() -> None:
    d = Directive(text="x")
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen assignment
        d.text = "y"  # type: ignore[misc]


def test_unknown_kind_is_a_typed_error() -> None:
    with pytest.raises(UnknownKind, match="telepathy"):
        Mapper().validate({"kind": "telepathy", "text": "x"})
    e = stored_entry(session="s", seq=0, parent=None, time_us=0, kind="telepathy", v=1, payload=b"{}")
    with pytest.raises(UnknownKind):
        Mapper().payload_of(e)


def test_invalid_payload_is_a_typed_error() -> None:
    with pytest.raises(InvalidPayload, match="text"):
        Mapper().validate({"kind": "directive"})


def test_directive_v1_upcasts_to_current() -> None:
    assert CURRENT_VERSION["directive"] == 2
    old = canonical.encode({"kind": "directive", "text": "see", "images": ["a.jpg", "b.png"]})
    e = stored_entry(session="s", seq=0, parent=None, time_us=0, kind="directive", v=1, payload=old)
    got = Mapper().payload_of(e)
    assert got == Directive(text="see", images=(ImageBlock(ref="a.jpg", media_type="image/jpeg"), ImageBlock(ref="b.png")))
    # the id still covers the bytes as written by the old version
    assert e.compute_id() == e.id


def test_newer_version_than_this_code_is_refused_clearly() -> None:
    e = stored_entry(session="s", seq=0, parent=None, time_us=0, kind="nudge", v=9,
                     payload=canonical.encode({"kind": "nudge", "tag": "t", "text": "x"}))
    with pytest.raises(InvalidPayload, match="upgrade"):
        Mapper().payload_of(e)


def test_adapter_is_one_discriminated_union() -> None:
    got = PAYLOAD_ADAPTER.validate_python({"kind": "intent_note", "text": "plan"})
    assert type(got).__name__ == "IntentNote"


def test_a_payload_nested_past_what_pydantic_serialises_is_invalid_payload() -> None:
    """An assistant step whose tool input nests 300 levels (pydantic stops at ~250) is refused as InvalidPayload
    saying what to do, not a ValueError from the serialiser."""
    from vak_context.events.payloads import AssistantStep, ToolUseBlock

    deep: Any = 1
    for _ in range(300):
        deep = {"d": deep}
    step = AssistantStep(blocks=(ToolUseBlock(id="c1", name="t", input={"x": deep}),), model="m", provider="p")
    with pytest.raises(InvalidPayload, match="nested this deep"):
        Mapper().encode_payload(step)
