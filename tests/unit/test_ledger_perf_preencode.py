"""Payloads encoded by the LedgerClient, sent as (kind, bytes), write what the models would (issue 14).

The client validates and canonically encodes each payload once, in the caller's process, and the
LedgerActor's store takes the pair as is. The property test checks that a store fed the pairs writes
the same entries, byte for byte and id for id, as a store fed the models; the other checks the
store's checks on a pair (the real actor on the local Ray: tests/ray/test_ledger_perf_preencode_ray.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.errors import InvalidPayload, OversizeEntry, UnknownKind
from vak_context.events.envelope import LedgerLimits, Mapper
from vak_context.events.payloads import Directive, Nudge
from vak_context.storage.ledger import LedgerStore

_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
_payload = st.one_of(
    st.builds(Nudge, tag=_text, text=_text),
    st.builds(Directive, text=_text),  # not flat (a tuple of images): the general encoder
    st.builds(lambda a, b: {"kind": "tool_result", "tool_use_id": a, "tool_name": "t", "content": b}, _text, _text),
)


def _entries(root: Path, appends: list[list[Any]]) -> list[tuple[str, str | None, str, bytes]]:
    with LedgerStore(root, clock=lambda: 1_700_000_000_000_000) as store:
        for payloads in appends:
            store.append("s", payloads)
        return [(e.id, e.parent, e.kind, e.payload) for e in store.entries("s")]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_payload, min_size=1, max_size=4), min_size=1, max_size=4))
def test_encoded_pairs_write_the_same_entries_as_the_models(appends: list[list[Any]]) -> None:
    """Appending ``Mapper().encode_payload(p)`` for each payload gives the same ids, parents, kinds and
    payload bytes as appending the payloads themselves (fixed clock)."""
    mapper = Mapper()
    encoded = [[mapper.encode_payload(p) for p in payloads] for payloads in appends]
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        assert _entries(Path(a), encoded) == _entries(Path(b), appends)


def test_the_store_checks_a_pairs_shape_kind_and_size(tmp_path: Path) -> None:
    """A pair that is not (str, bytes) is InvalidPayload, an unknown kind UnknownKind, bytes over the
    store's limit OversizeEntry; nothing is appended."""
    with LedgerStore(tmp_path, limits=LedgerLimits(max_payload_bytes=10)) as store:
        with pytest.raises(InvalidPayload):
            store.append("s", [("nudge", "not bytes")])  # type: ignore[list-item]
        with pytest.raises(UnknownKind):
            store.append("s", [("no-such-kind", b"{}")])  # type: ignore[list-item]
        with pytest.raises(OversizeEntry):
            store.append("s", [("nudge", b"x" * 11)])  # type: ignore[list-item]
        assert store.count("s") == 0


