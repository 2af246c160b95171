"""``Mapper._decode`` reads a current-version payload in one pass (pydantic's JSON parser and validation
together, issue 37: about a third of json.loads and then validation): whatever it accepts, the checked path
(``canonical.decode``, ``upcast``, ``validate_python``) reads as the same model, field for field and in the same
order; whatever it refuses is read the checked way, with the checked path's typed errors."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from vak_context.errors import InvalidInput, InvalidPayload
from vak_context.events import canonical
from vak_context.events.envelope import CURRENT_VERSION, PAYLOAD_ADAPTER, Mapper, StoredEntry, upcast
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

ODD_VALUES: list[Any] = [None, True, 0, -1, 2**70, 1.5, -0.0, 1e-7, 1e300, "", "x", "é\u2028\x00", "\\ud800",
                         [], [1, "a"], {}, {"k": [None]}, "2026-12-06T00:00:00Z"]


def checked(entry: StoredEntry) -> Any:
    raw = canonical.decode(entry.payload)
    if not isinstance(raw, dict):
        raise InvalidPayload("not an object")
    return PAYLOAD_ADAPTER.validate_python(upcast(entry.kind, entry.v, raw))


def entry_of(kind: str, payload: bytes, v: int | None = None) -> StoredEntry:
    return StoredEntry(id="e", parent=None, session="s", seq=0, time_us=0, kind=kind,
                       v=CURRENT_VERSION.get(kind, 1) if v is None else v, payload=payload)


@pytest.fixture(scope="module")
def entries(tmp_path_factory: pytest.TempPathFactory) -> list[StoredEntry]:
    folder: Path = tmp_path_factory.mktemp("ledger")
    with LedgerStore(folder) as store:
        generate_session(seed=3, turns=12, append=lambda p, b: store.append("s", [p], blobs=[b])[0])
        return store.entries("s")


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b and a.model_dump_json() == b.model_dump_json()


def test_every_generated_entry_reads_the_same_both_ways(entries: list[StoredEntry]) -> None:
    assert len({e.kind for e in entries}) >= 8
    for entry in entries:
        assert same(Mapper()._decode(entry), checked(entry)), entry.kind


def test_mutated_payloads_read_the_same_or_fail_the_same_way(entries: list[StoredEntry]) -> None:
    rng = random.Random(37)
    for _ in range(1500):
        entry = rng.choice(entries)
        raw = json.loads(entry.payload)
        key = rng.choice(sorted(raw))
        if key != "kind" or rng.random() < 0.1:
            raw[key] = rng.choice(ODD_VALUES)
        data = json.dumps(raw, ensure_ascii=rng.random() < 0.5).encode()
        if rng.random() < 0.2:  # a byte changed: bad UTF-8, a broken token, another value
            i = rng.randrange(len(data))
            data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
        mutated = entry_of(entry.kind, data)
        try:
            want = checked(mutated)
        except (InvalidInput, ValueError):  # the checked path refuses it: so does the reader, with a typed error
            with pytest.raises(InvalidInput):
                Mapper()._decode(mutated)
            continue
        assert same(Mapper()._decode(mutated), want), data


def test_constants_and_older_versions_take_the_checked_path() -> None:
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        bad = entry_of("receipt", b'{"kind":"receipt","latency_ms":' + constant + b',"model":"m","provider":"p"}')
        with pytest.raises(InvalidInput):
            Mapper()._decode(bad)
    old = entry_of("directive", b'{"images":["a.png"],"kind":"directive","text":"look"}', v=1)
    assert Mapper()._decode(old).images[0].media_type == "image/png"  # upcast from v1
    with pytest.raises(InvalidPayload):
        Mapper()._decode(entry_of("turn_tail", b"[1, 2]"))
