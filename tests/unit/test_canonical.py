"""Canonical JSON and entry ids: round trips, stability, and rejection of what has no one encoding."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.errors import InvalidUtf8, NonCanonicalValue
from vak_context.events import canonical
from vak_context.events.envelope import Mapper, StoredEntry, compute_id
from vak_context.events.payloads import Directive, Nudge

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
@settings(max_examples=300)
def test_encoding_round_trips_and_is_a_fixed_point(value: object) -> None:
    data = canonical.encode(value)
    back = canonical.decode(data)
    assert canonical.encode(back) == data
    assert canonical.is_canonical(data)
    data.decode("utf-8")  # always valid UTF-8


@given(st.dictionaries(st.text(max_size=6), st.integers(), min_size=2, max_size=6))
def test_key_order_does_not_change_the_bytes(d: dict[str, int]) -> None:
    reversed_d = dict(reversed(list(d.items())))
    assert canonical.encode(d) == canonical.encode(reversed_d)


def test_known_bytes() -> None:
    assert canonical.encode({"b": 1, "a": [True, None, 1.5, "é\n"]}) == '{"a":[true,null,1.5,"é\\n"],"b":1}'.encode()
    assert canonical.encode(-0.0) == b"0.0"
    assert canonical.encode(1.0) == b"1.0"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, b"bytes", {1: "int key"}, {"s": {1, 2}}])
def test_values_without_one_encoding_are_rejected(bad: object) -> None:
    with pytest.raises(NonCanonicalValue):
        canonical.encode(bad)


def test_lone_surrogate_is_invalid_utf8() -> None:
    with pytest.raises(InvalidUtf8):
        canonical.encode({"text": "broken \ud800 surrogate"})
    with pytest.raises(InvalidUtf8):
        canonical.decode(b'{"a":"\xff"}')


def test_non_canonical_bytes_are_detected() -> None:
    assert not canonical.is_canonical(b'{"b":1, "a":2}')
    assert not canonical.is_canonical(b'{"b":1,"a":2}')
    assert canonical.is_canonical(b'{"a":2,"b":1}')


entry_fields = st.fixed_dictionaries(
    {
        "parent": st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        "session": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
        "seq": st.integers(min_value=0, max_value=10**9),
        "time_us": st.integers(min_value=0, max_value=2**62),
        "text": st.text(max_size=50),
    }
)


@given(entry_fields)
@settings(max_examples=200)
def test_ids_are_stable_and_cover_every_field(f: dict) -> None:
    m = Mapper()
    make = lambda **kw: m.entry(  # noqa: E731
        Nudge(tag="t", text=kw.get("text", f["text"])),
        session=kw.get("session", f["session"]), seq=kw.get("seq", f["seq"]),
        parent=kw.get("parent", f["parent"]), time_us=kw.get("time_us", f["time_us"]),
    )
    a, b = make(), make()
    assert a.id == b.id == a.compute_id()
    assert len(a.id) == 64
    assert make(seq=f["seq"] + 1).id != a.id
    assert make(time_us=f["time_us"] + 1).id != a.id
    assert make(parent="f" * 64 if f["parent"] != "f" * 64 else "e" * 64).id != a.id
    assert make(text=f["text"] + "x").id != a.id


def test_id_matches_documented_recipe() -> None:
    import blake3

    e = Mapper().entry(Directive(text="hi"), session="s", seq=0, parent=None, time_us=5, blob=b"xyz")
    header = canonical.encode(
        {"blob": {"blake3": blake3.blake3(b"xyz").hexdigest(), "len": 3}, "kind": "directive", "parent": None,
         "seq": 0, "session": "s", "time": 5, "v": 2}
    )
    assert e.id == blake3.blake3(header + b"\n" + e.payload).hexdigest()
    assert e.id == compute_id(None, "s", 0, 5, "directive", 2, e.payload, e.blob_meta())
    assert isinstance(e, StoredEntry)


@given(entry_fields, st.none() | st.binary(max_size=64), st.sampled_from(["nudge", "directive"]), st.integers(1, 3))
def test_fast_header_equals_the_canonical_encoder(f: dict, blob: bytes | None, kind: str, v: int) -> None:
    from vak_context.events.envelope import blob_meta, header_bytes

    info = blob_meta(blob)
    expected = canonical.encode({"blob": info, "kind": kind, "parent": f["parent"], "seq": f["seq"],
                                 "session": f["session"], "time": f["time_us"], "v": v})
    assert header_bytes(f["parent"], f["session"], f["seq"], f["time_us"], kind, v, info) == expected
    # and the fallback covers what the fast path does not
    odd = header_bytes(None, "sess ion\u00e9", 1, 2, kind, v, None)
    assert odd == canonical.encode({"blob": None, "kind": kind, "parent": None, "seq": 1,
                                    "session": "sess ion\u00e9", "time": 2, "v": v})


str_keyed = st.recursive(
    json_scalars | st.just(-0.0) | st.just("x\ud800y"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(str_keyed)
@settings(max_examples=300)
def test_fast_path_gives_the_same_bytes_or_the_same_error(value: object) -> None:
    try:
        expected = canonical.encode(value)
    except (InvalidUtf8, NonCanonicalValue) as exc:
        with pytest.raises(type(exc)):
            canonical.encode_str_keyed(value)
        return
    assert canonical.encode_str_keyed(value) == expected
