"""Errors are translated at every edge: no public entry point of the ledger lets a Ray or builtin error escape.

For each way to reach a ledger (the store, the LedgerActor class, a LedgerClient over a store, and a
LedgerClient over the actor on the real local Ray) and each documented failure case (a bad session
name, a non-canonical or invalid payload, an unknown id or session, a tampered ledger, a dead actor),
what the caller gets is the project's own error type, defined in ``vak/errors.py``: not a builtin
(``ValueError``, ``TypeError``) and not a Ray error (nor Ray's dynamic subclass of the cause).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayError, RayTaskError

from tests.fakes.ledgers import ActorInProcess
from vak_context.actors.factory import get_ledger_actor, ledger_actor
from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.ray_errors import map_ray_errors
from vak_context.errors import (
    ActorError,
    InvalidInput,
    InvalidName,
    InvalidPayload,
    InvalidUtf8,
    LedgerCorrupt,
    NonCanonicalValue,
    UnknownEntry,
    UnknownKind,
    UnknownSession,
    VakError,
)
from vak_context.events import canonical
from vak_context.events.payloads import Directive, Nudge
from vak_context.storage.contract import Ledger
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import list_segments, scan_segment

KINDS = ["store", "actor", "client-store", pytest.param("client-ray", marks=pytest.mark.ray)]


def raised(call: Callable[[], Any]) -> BaseException:
    """The error ``call`` raises, checked to be one of the project's own types, and nothing else."""
    try:
        call()
    except BaseException as exc:
        assert isinstance(exc, VakError), f"{type(exc).__module__}.{type(exc).__qualname__} escaped: {exc}"
        assert not isinstance(exc, RayError), f"a Ray error escaped: {type(exc).__mro__}"
        assert type(exc).__module__ == "vak_context.errors", f"{type(exc)} is not the project's own class"
        return exc
    raise AssertionError("no error was raised")


@pytest.fixture()
def open_ledger(request: pytest.FixtureRequest) -> Iterator[Callable[[str, Path], Ledger]]:
    """Opens a ledger folder the way ``kind`` names; closes what it opened afterwards."""
    opened: list[Callable[[], None]] = []

    def open_(kind: str, root: Path) -> Ledger:
        if kind == "store":
            store = LedgerStore(root)
            opened.append(store.close)
            return store
        if kind == "actor":
            actor = ActorInProcess(root)
            opened.append(actor.close)
            return actor
        if kind == "client-store":
            store = LedgerStore(root)
            opened.append(store.close)
            return LedgerClient(str(root), store)
        request.getfixturevalue("ray_cluster")
        handle = ledger_actor(root)
        opened.append(lambda: ray.kill(handle, no_restart=True))
        return LedgerClient(str(root), handle)

    yield open_
    for close in reversed(opened):
        close()


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_is_a_typed_error_at_every_entry_point(
        kind: str, open_ledger: Callable[[str, Path], Ledger], ledger_dir: Path) -> None:
    """Bad names, bad payloads, a blob count that does not match, unknown ids and sessions: each is its
    own vak error, and the ledger still appends afterwards."""
    ledger = open_ledger(kind, ledger_dir)
    (first,) = ledger.append("s", [Directive(text="one")])
    cases: list[tuple[Callable[[], Any], type[VakError]]] = [
        (lambda: ledger.append("../escape", [Directive(text="x")]), InvalidName),
        (lambda: ledger.head("a/b"), InvalidName),
        (lambda: ledger.append("s", [{"kind": "nudge", "tag": "t", "text": "\udc80"}]), InvalidUtf8),
        (lambda: ledger.append("s", [{"kind": "nudge", "tag": 5}]), InvalidPayload),
        (lambda: ledger.append("s", [{"kind": "no-such-kind"}]), UnknownKind),
        (lambda: ledger.append("s", [Nudge(tag="t", text="a")], blobs=[b"1", b"2"]), InvalidInput),
        (lambda: ledger.get("0" * 64), UnknownEntry),
        (lambda: ledger.chain_to_root("not an id"), UnknownEntry),
        (lambda: ledger.entries("s", 5, 2), UnknownEntry),
        (lambda: ledger.entries("never-written"), UnknownSession),
        (lambda: ledger.verify("never-written"), UnknownSession),
    ]
    for call, expected in cases:
        assert isinstance(raised(call), expected)
    (second,) = ledger.append("s", [Nudge(tag="t", text="after the errors")])
    assert [e.id for e in ledger.chain_to_root(second)] == [first, second]


def _tampered_ledger(root: Path) -> list[str]:
    """Three entries, one batch each, with the middle batch's body wrecked on disk; their ids."""
    with LedgerStore(root) as store:
        ids = [store.append("s", [Nudge(tag="t", text="z" * 200)])[0] for _ in range(3)]
    ((number, seg, _),) = list_segments(root / "sessions" / "s")
    batch = scan_segment(seg, number, True).batches[1]
    data = bytearray(seg.read_bytes())
    for pos in range(batch.offset + 200, batch.end - 8):
        data[pos] = 0
    seg.write_bytes(bytes(data))
    return ids


@pytest.mark.parametrize("kind", KINDS)
def test_a_tampered_ledger_is_ledger_corrupt_or_a_verify_report(
        kind: str, open_ledger: Callable[[str, Path], Ledger], ledger_dir: Path) -> None:
    """Reading through a wrecked batch raises LedgerCorrupt (not pyarrow's error); verify() names the
    damaged entry in its report instead of raising."""
    ids = _tampered_ledger(ledger_dir)
    ledger = open_ledger(kind, ledger_dir)
    assert ledger.get(ids[0]).id == ids[0]  # what is intact still reads
    assert isinstance(raised(lambda: ledger.get(ids[1])), (LedgerCorrupt, UnknownEntry))
    assert isinstance(raised(lambda: ledger.chain_to_root(ids[2])), LedgerCorrupt)
    report = ledger.verify()
    assert not report.ok and report.first_bad is not None and report.first_bad.seq == 1


@pytest.mark.ray
def test_a_dead_ledger_actor_is_an_actor_error_that_says_what_to_do(ray_cluster: Any, ledger_dir: Path) -> None:
    """Every call through a client whose LedgerActor was killed (reads, coalesced and direct appends,
    verify) raises ActorError naming the call; asking for a LedgerActor that is not running too."""
    handle = ledger_actor(ledger_dir)
    client = LedgerClient(str(ledger_dir), handle)
    client.append("s", [Directive(text="one")])
    ray.kill(handle, no_restart=True)
    _until_dead(handle)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("ledger head", lambda: client.head("s")),
        ("ledger append", lambda: client.append("s", [Nudge(tag="t", text="lost")])),
        ("ledger append", lambda: client.append("s", [Nudge(tag="t", text="lost")], parent="0" * 64)),
        ("ledger verify", lambda: client.verify()),
    ]
    for what, call in calls:
        error = raised(call)
        assert isinstance(error, ActorError) and what in str(error) and "retry" in str(error)
    assert isinstance(raised(lambda: get_ledger_actor(ledger_dir / "nothing-here")), ActorError)


def _until_dead(handle: Any, deadline_s: float = 60.0) -> None:
    """Return once Ray knows the killed actor is dead. ``ray.kill`` returns when the kill is sent, not when the
    actor is gone, and until then calls still reach it (the test once saw a head() answered). Each poll is a
    real call; ActorDiedError is final for an actor killed with no_restart."""
    deadline = time.monotonic() + deadline_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            ray.get(handle.pid.remote(), timeout=left)
        except ActorDiedError:
            return
        except (ActorUnavailableError, GetTimeoutError):
            continue  # unreachable for now (dying, or its node busy): not yet known dead
    raise AssertionError(f"the killed LedgerActor still answered after {deadline_s} s")


def test_map_ray_errors_passes_the_actors_own_error_and_translates_the_rest() -> None:
    """A RayTaskError whose cause is a vak error comes out as that error; a RayTaskError of anything
    else, a dead actor and a timeout come out as ActorError naming the call; other errors pass as they are."""
    cause = UnknownEntry("abc")

    def fail(exc: BaseException) -> None:
        with map_ray_errors("ledger get"):
            raise exc

    assert raised(lambda: fail(RayTaskError("get", "traceback", cause))) is cause
    for ray_error in (RayTaskError("get", "traceback", KeyError("x")), ActorDiedError(),
                      GetTimeoutError("timed out")):
        error = raised(lambda e=ray_error: fail(e))  # type: ignore[misc]
        assert isinstance(error, ActorError) and "the ledger get call failed" in str(error)
        assert error.__cause__ is ray_error
    with pytest.raises(KeyError):  # not Ray's: not this edge's to translate
        fail(KeyError("x"))


def test_canonical_json_raises_only_its_own_errors() -> None:
    """What canonical JSON cannot encode or decode is NonCanonicalValue or InvalidUtf8, never a TypeError."""
    cases: list[tuple[Callable[[], Any], type[VakError]]] = [
        (lambda: canonical.encode(b"raw"), NonCanonicalValue),
        (lambda: canonical.encode({"x": float("nan")}), NonCanonicalValue),
        (lambda: canonical.encode({1: "int key"}), NonCanonicalValue),
        (lambda: canonical.encode("\udc80"), InvalidUtf8),
        (lambda: canonical.encode_str_keyed({"a": {1, 2}}), NonCanonicalValue),
        (lambda: canonical.encode_str_keyed({"a": object()}), NonCanonicalValue),
        (lambda: canonical.decode(b"\xff"), InvalidUtf8),
        (lambda: canonical.decode(b"NaN"), NonCanonicalValue),
        (lambda: canonical.decode(b"{"), NonCanonicalValue),
    ]
    for call, expected in cases:
        assert isinstance(raised(call), expected)


def test_a_client_without_a_ledger_is_refused_and_opens_no_writer(ledger_dir: Path) -> None:
    """LedgerClient never opens a folder by itself (that would be a second writer beside the LedgerActor):
    without a ledger it raises InvalidInput saying what to pass, and nothing is created on disk."""
    error = raised(lambda: LedgerClient(str(ledger_dir), None))
    assert isinstance(error, InvalidInput) and "ledger_actor(root)" in str(error) and "LedgerStore(root)" in str(error)
    assert not ledger_dir.exists()
