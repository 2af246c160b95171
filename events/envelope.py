"""The stored envelope, kept apart from the payload (as eventsourcing's StoredEvent and Mapper).

A ``StoredEntry`` is what the ledger holds: id, parent, session, seq, time, kind, schema version,
the payload's canonical JSON bytes, and an optional blob of raw bytes (an evidence body).
``Mapper`` turns payload models into stored entries and back, upcasting older versions.

Entry id: ``blake3(header + b"\\n" + payload)`` in hex, where ``header`` is the canonical JSON of
``{"blob", "kind", "parent", "seq", "session", "time", "v"}`` (``blob`` is ``null`` or
``{"blake3": hex, "len": n}``) and ``payload`` is the payload's canonical JSON. The parent id is
inside the hashed bytes, so the ids form a hash chain: changing any entry changes its id and so
breaks every child's parent link.
"""

from __future__ import annotations

import re
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import blake3
from pydantic import BaseModel, PlainSerializer, RootModel, ValidationError, WrapSerializer
from pydantic.fields import FieldInfo

import vak_context.events.canonical as canonical
from vak_context.errors import InvalidPayload, OversizeEntry, UnknownKind
from vak_context.events.payloads import KINDS, PAYLOAD_ADAPTER, PAYLOAD_TYPES

# A payload validated and canonically encoded by ``Mapper.encode_payload`` in the caller's process
# (vak_context.actors.ledger.client), sent to the LedgerActor as a plain (kind, bytes) tuple: it pickles about
# ten times faster than a pydantic model, and the actor need not encode it again. The bytes are
# the same the actor would have written, so the ids are too; the actor checks the kind and size.
EncodedPayload = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class LedgerLimits:
    """Size limits on one entry. Bodies of 64 MiB and more are stored whole in the blob."""

    max_payload_bytes: int = 16 * 1024 * 1024
    max_blob_bytes: int = 512 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoredEntry:
    id: str
    parent: str | None
    session: str
    seq: int
    time_us: int  # unix microseconds, UTC
    kind: str
    v: int  # the payload's schema version
    payload: bytes  # canonical JSON
    blob: bytes | None = None

    def blob_meta(self) -> dict[str, Any] | None:
        return blob_meta(self.blob)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields in order (what crosses between actors on Ray): a frozen slotted dataclass's
        own pickling calls ``dataclasses.fields`` and sets each field in turn, about twice the time."""
        return (StoredEntry, (self.id, self.parent, self.session, self.seq, self.time_us, self.kind, self.v,
                              self.payload, self.blob))

    def compute_id(self) -> str:
        """The id this entry's bytes hash to."""
        info = self.blob_meta()
        return compute_id(self.parent, self.session, self.seq, self.time_us, self.kind, self.v, self.payload, info)


def blob_meta(blob: bytes | None) -> dict[str, Any] | None:
    if blob is None:
        return None
    threads = blake3.blake3.AUTO if len(blob) > 1 << 22 else 1
    return {"blake3": blake3.blake3(blob, max_threads=threads).hexdigest(), "len": len(blob)}


def compute_id(
    parent: str | None, session: str, seq: int, time_us: int, kind: str, v: int, payload: bytes,
    blob_info: dict[str, Any] | None,
) -> str:
    h = blake3.blake3(header_bytes(parent, session, seq, time_us, kind, v, blob_info))
    h.update(b"\n")
    h.update(payload)
    return h.hexdigest()


def header_bytes(
    parent: str | None, session: str, seq: int, time_us: int, kind: str, v: int, blob_info: dict[str, Any] | None
) -> bytes:
    """Canonical JSON of the envelope header, formatted directly on the hot path.

    Equal to ``canonical.encode({...})`` (a test checks it): every field is an int, a hex id, or a
    name that needs no escaping. Anything else falls back to the general encoder.
    """
    if _plain(session) and _plain(kind) and (parent is None or _plain(parent)) and (
        blob_info is None or (set(blob_info) == {"blake3", "len"} and _plain(blob_info["blake3"]))
    ) and type(seq) is int and type(time_us) is int and type(v) is int:
        blob = "null" if blob_info is None else f'{{"blake3":"{blob_info["blake3"]}","len":{int(blob_info["len"])}}}'
        par = "null" if parent is None else f'"{parent}"'
        return (f'{{"blob":{blob},"kind":"{kind}","parent":{par},"seq":{seq},"session":"{session}",'
                f'"time":{time_us},"v":{v}}}').encode()
    return canonical.encode(
        {"blob": blob_info, "kind": kind, "parent": parent, "seq": seq, "session": session, "time": time_us, "v": v}
    )


def chain_ids(
    parent: str | None, session: str, first_seq: int, time_us: int, kinds: list[str], vs: list[int],
    payloads: list[bytes], blob_infos: list[dict[str, Any] | None],
) -> list[str]:
    """The ids of entries appended as one chain: entry ``i`` has seq ``first_seq + i`` and the
    previous entry (``parent`` for the first) as its parent; all share ``time_us``.

    Equal to calling ``compute_id`` per entry (a test checks it). The checks that let the header
    be formatted directly are made once per call instead of once per entry: an id this function
    returns is lower-case hex, so every parent after the first is plain by construction.
    """
    ids: list[str] = []
    if not (_plain(session) and (parent is None or _plain(parent)) and type(time_us) is int
            and type(first_seq) is int):
        for i, (kind, v, payload, info) in enumerate(zip(kinds, vs, payloads, blob_infos, strict=True)):
            parent = compute_id(parent, session, first_seq + i, time_us, kind, v, payload, info)
            ids.append(parent)
        return ids
    par = "null" if parent is None else f'"{parent}"'
    tail = f',"session":"{session}","time":{time_us},"v":'
    seq = first_seq
    hasher = blake3.blake3
    for kind, v, payload, info in zip(kinds, vs, payloads, blob_infos, strict=True):
        if info is None and kind in _PLAIN_KINDS and type(v) is int:
            head = f'{{"blob":null,"kind":"{kind}","parent":{par},"seq":{seq}{tail}{v}}}\n'
            eid = hasher(head.encode() + payload).hexdigest()
        else:  # a blob, or a kind never seen: the checked path
            eid = compute_id(None if par == "null" else par[1:-1], session, seq, time_us, kind, v, payload, info)
            if kind not in _PLAIN_KINDS and _plain(kind):
                _PLAIN_KINDS.add(kind)
        ids.append(eid)
        par = f'"{eid}"'
        seq += 1
    return ids


@dataclass(frozen=True, slots=True)
class At:
    """Where a caller chains entries it encoded itself: after ``parent`` (the session's head as the caller
    knows it, None for an empty session), from ``seq``, all stamped ``time_us``. An id depends only on the
    entry's bytes, its parent, seq and time, so the caller knows the ids before the append (``chained``); the
    writer appends such entries only there (``ChainMoved`` otherwise), and so writes exactly those ids.
    Sound while the caller is the session's only appender (the turn loop's driver while it holds a turn)."""

    parent: str | None
    seq: int
    time_us: int


def chained(at: At, session: str, payloads: Sequence[EncodedPayload],
            blobs: Sequence[bytes | None] | None = None) -> list[StoredEntry]:
    """The entries ``payloads`` (encoded: ``Mapper.encode_payload``) become when appended at ``at``, with
    the ids the writer gives them (``chain_ids``)."""
    blob_list = list(blobs) if blobs is not None else [None] * len(payloads)
    kinds = [kind for kind, _ in payloads]
    datas = [data for _, data in payloads]
    vs = [CURRENT_VERSION.get(kind, 1) for kind in kinds]
    ids = chain_ids(at.parent, session, at.seq, at.time_us, kinds, vs, datas, [blob_meta(b) for b in blob_list])
    parents = [at.parent, *ids[:-1]]
    return [StoredEntry(eid, parent, session, at.seq + i, at.time_us, kind, v, data, blob)
            for i, (eid, parent, kind, v, data, blob) in enumerate(zip(ids, parents, kinds, vs, datas, blob_list,
                                                                      strict=True))]


def runs(entries: Sequence[StoredEntry]) -> list[tuple[At, list[StoredEntry]]]:
    """``chained`` entries split where their time changes: each run is one append at its ``At``."""
    out: list[tuple[At, list[StoredEntry]]] = []
    for e in entries:
        if out and out[-1][1][-1].time_us == e.time_us:
            out[-1][1].append(e)
        else:
            out.append((At(e.parent, e.seq, e.time_us), [e]))
    return out


_PLAIN_KINDS: set[str] = set()  # kinds already found plain, so the hot path skips the check
_PLAIN = re.compile(r"^[A-Za-z0-9._-]*$")


def _plain(text: object) -> bool:
    """True when ``text`` is a str JSON writes unescaped: letters, digits, '.', '_', '-'."""
    # isalnum() alone would pass non-ASCII letters; hex ids and most names take this fast branch.
    return type(text) is str and text.isascii() and (text.isalnum() or _PLAIN.match(text) is not None)


# ------------------------------------------------------------------ schema versions and upcasters

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# The version each kind is written at today. A kind not listed is at version 1.
CURRENT_VERSION: dict[str, int] = {"directive": 2, "plan": 2}

# (kind, from_version) -> function turning a payload dict of that version into the next version.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(kind: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(kind, from_version)] = fn
        return fn

    return register


@upcaster("directive", 1)
def _directive_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # v1 stored images as bare reference strings; v2 stores {ref, media_type}.
    images = [{"ref": ref, "media_type": _guess_media_type(ref)} for ref in payload.get("images", [])]
    return {**payload, "images": images}


@upcaster("plan", 1)
def _plan_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # v2 may hold the rows as a delta (``PlanRecord.base``/``rows``, ledger format 2); a v1 entry's rows are its
    # ``plan["turns"]``, read as they are.
    return payload


def _guess_media_type(ref: str) -> str:
    lower = ref.lower()
    for ext, media in ((".jpg", "image/jpeg"), (".jpeg", "image/jpeg"), (".gif", "image/gif"), (".webp", "image/webp")):
        if lower.endswith(ext):
            return media
    return "image/png"


def upcast(kind: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    target = CURRENT_VERSION.get(kind, 1)
    if version > target:
        raise InvalidPayload(
            f"{kind} entry is schema version {version}, newer than this vak-context ({target}); upgrade vak-context"
        )
    while version < target:
        step = UPCASTERS.get((kind, version))
        if step is None:
            raise InvalidPayload(f"no upcaster for {kind} v{version}; the entry cannot be read by this version")
        payload = step(payload)
        version += 1
    return payload


# ------------------------------------------------------------------ the mapper

_MODEL_TYPES = frozenset(PAYLOAD_TYPES.values())


class Mapper:
    """Payload models <-> stored entries."""

    def __init__(self, limits: LedgerLimits | None = None) -> None:
        self.limits = limits or LedgerLimits()

    def validate(self, payload: BaseModel | dict[str, Any]) -> BaseModel:
        """Accept a payload model or a plain dict; return the validated model."""
        if type(payload) in _MODEL_TYPES:
            return payload  # type: ignore[return-value]
        if isinstance(payload, BaseModel):
            if type(payload) not in _MODEL_TYPES:
                raise UnknownKind(type(payload).__name__, list(KINDS))
            return payload
        if not isinstance(payload, dict):
            raise InvalidPayload(f"a payload is a model or a dict, not {type(payload).__name__}")
        kind = payload.get("kind")
        if kind not in PAYLOAD_TYPES:
            raise UnknownKind(kind, list(KINDS))
        try:
            model: BaseModel = PAYLOAD_ADAPTER.validate_python(payload)
        except ValidationError as exc:
            raise InvalidPayload(f"{kind} payload does not validate: {_first_error(exc)}") from exc
        return model

    def encode_payload(self, payload: BaseModel | dict[str, Any] | EncodedPayload) -> tuple[str, bytes]:
        if type(payload) is tuple:  # validated and encoded by a LedgerClient: only checked here
            return self._check_encoded(payload)
        model = self.validate(payload)  # type: ignore[arg-type]  # not a tuple, so a model or a dict
        kind: str = model.kind  # type: ignore[attr-defined]
        cls = type(model)
        keys = _FLAT_KEYS[cls] if cls in _FLAT_KEYS else _FLAT_KEYS.setdefault(cls, flat_keys(cls))
        data = None
        if keys is not None:  # a flat model: its field values are its JSON-mode dump
            values = model.__dict__
            data = canonical.encode_plain_object({k: values[k] for k in keys})
        if data is None:
            # JSON-mode dumps have string keys only, so the fast canonical path applies.
            try:
                dumped = model.model_dump(mode="json")
            except (ValueError, RecursionError) as exc:  # pydantic stops at ~250 levels of nesting
                raise InvalidPayload(f"{kind} payload cannot be serialised ({exc}); values nested this deep "
                                     "cannot be stored: flatten them, or store them as an evidence blob") from exc
            data = canonical.encode_str_keyed(dumped)
        if len(data) > self.limits.max_payload_bytes:
            raise OversizeEntry("payload", len(data), self.limits.max_payload_bytes)
        return kind, data

    def _check_encoded(self, encoded: tuple[Any, ...]) -> tuple[str, bytes]:
        """An ``EncodedPayload``'s shape, kind and size; its bytes are the caller's ``encode_payload``'s."""
        if len(encoded) != 2 or type(encoded[0]) is not str or type(encoded[1]) is not bytes:
            raise InvalidPayload("an encoded payload is a (kind, canonical JSON bytes) pair from "
                                 "Mapper.encode_payload; pass the payload model instead")
        kind, data = encoded
        if kind not in PAYLOAD_TYPES:
            raise UnknownKind(kind, list(KINDS))
        if len(data) > self.limits.max_payload_bytes:
            raise OversizeEntry("payload", len(data), self.limits.max_payload_bytes)
        return kind, data

    def check_blob(self, blob: bytes | None) -> None:
        if blob is not None and len(blob) > self.limits.max_blob_bytes:
            raise OversizeEntry("blob", len(blob), self.limits.max_blob_bytes)

    def entry(
        self,
        payload: BaseModel | dict[str, Any],
        *,
        session: str,
        seq: int,
        parent: str | None,
        time_us: int,
        blob: bytes | None = None,
    ) -> StoredEntry:
        kind, data = self.encode_payload(payload)
        self.check_blob(blob)
        draft = StoredEntry(
            id="", parent=parent, session=session, seq=seq, time_us=time_us, kind=kind,
            v=CURRENT_VERSION.get(kind, 1), payload=data, blob=blob,
        )
        return _with_id(draft)

    def payload_of(self, entry: StoredEntry) -> Any:
        """The entry's payload as its current model (upcast from older versions). Shared with every other
        reader in this process that decoded the same entry lately (``DECODED``): a payload is a frozen model."""
        hit = DECODED.get(entry)
        if hit is not None:
            return hit
        model = self._decode(entry)
        DECODED.put(entry, model)
        return model

    def _decode(self, entry: StoredEntry) -> Any:
        if entry.kind not in PAYLOAD_TYPES:
            raise UnknownKind(entry.kind, list(KINDS))
        data = entry.payload
        # A current-version payload is parsed and validated in one pass (pydantic's JSON parser: about a third
        # of the time of json.loads, then validation). Anything that pass refuses (a constant NaN or Infinity
        # aside, which it would take) is read the checked way below, which says what is wrong.
        if entry.v == CURRENT_VERSION.get(entry.kind, 1) and b"NaN" not in data and b"Infinity" not in data:
            try:
                return PAYLOAD_ADAPTER.validate_json(data)
            except ValidationError:
                pass
        raw = canonical.decode(data)
        if not isinstance(raw, dict):
            raise InvalidPayload(f"entry {entry.id} payload is not a JSON object")
        raw = upcast(entry.kind, entry.v, raw)
        try:
            return PAYLOAD_ADAPTER.validate_python(raw)
        except ValidationError as exc:
            raise InvalidPayload(f"entry {entry.id} ({entry.kind}) does not validate: {_first_error(exc)}") from exc


class DecodedPayloads:
    """The payload models decoded last in this process, by entry id, whoever decoded them (issue 35: a
    resumed session's chain was decoded once by the planner's view and again by the evidence TurnIndex, ~2.5
    decodes an entry). A hit is the same kind, version and payload bytes (checked: an id is a content hash,
    the bytes comparison keeps a hand-made entry with a reused id from getting another's payload). Bounded by
    entries and by the payloads' bytes; a payload over ``MEMO_MAX_PAYLOAD`` (a plan entry late in a long
    session) is decoded each time, as its writer folds it from the model it wrote (actors/session_fold.py)."""

    def __init__(self, entries: int = 16_384, payload_bytes: int = 32 << 20, largest: int = 64 << 10) -> None:
        self.limit, self.limit_bytes, self.largest = entries, payload_bytes, largest
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[str, int, bytes, Any]] = OrderedDict()
        self._bytes = 0
        self.hits = 0  # for tests and benches

    def get(self, entry: StoredEntry) -> Any:
        with self._lock:
            kept = self._kept.get(entry.id)
            if kept is None:
                return None
            kind, v, data, model = kept
            if kind != entry.kind or v != entry.v or (data is not entry.payload and data != entry.payload):
                return None
            self._kept.move_to_end(entry.id)
            self.hits += 1
            return model

    def put(self, entry: StoredEntry, model: Any) -> None:
        size = len(entry.payload)
        if size > self.largest or not entry.id:
            return
        with self._lock:
            old = self._kept.pop(entry.id, None)
            if old is not None:
                self._bytes -= len(old[2])
            self._kept[entry.id] = (entry.kind, entry.v, entry.payload, model)
            self._bytes += size
            while len(self._kept) > self.limit or self._bytes > self.limit_bytes:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= len(dropped[2])

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0


DECODED = DecodedPayloads()

_FLAT_KEYS: dict[type, tuple[str, ...] | None] = {}


def flat_keys(cls: type) -> tuple[str, ...] | None:
    """The sorted field names of a payload model whose JSON-mode dump is its ``__dict__`` as is:
    every field a str, int, bool, None, a Literal of those or a tuple/list of str, with no
    serializer, alias, exclusion, computed field or extra field to change the dump. None otherwise.
    (Values are checked again at each call: a model made with ``model_construct`` can hold anything.)
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or issubclass(cls, RootModel):
        return None
    decorators = cls.__pydantic_decorators__
    config = cls.model_config
    if (decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields
            or config.get("extra") == "allow" or config.get("serialize_by_alias")):
        return None
    for field in cls.model_fields.values():
        if field.exclude or field.serialization_alias is not None or not _flat_annotation(field.annotation):
            return None
        if any(isinstance(m, PlainSerializer | WrapSerializer) for m in field.metadata):
            return None
    return tuple(sorted(cls.model_fields))


def _flat_annotation(ann: Any, *, str_only: bool = False) -> bool:
    if ann is str:
        return True
    if str_only:
        origin = get_origin(ann)
        return origin is Annotated and _flat_annotation(get_args(ann)[0], str_only=True) and all(
            isinstance(m, FieldInfo) for m in get_args(ann)[1:])
    if ann in (int, bool, type(None)):
        return True
    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return all(type(a) in (str, int, bool) or a is None for a in args)
    if origin is Union or origin is types.UnionType:
        return all(_flat_annotation(a) for a in args)
    if origin is Annotated:
        return _flat_annotation(args[0]) and all(isinstance(m, FieldInfo) for m in args[1:])
    if origin in (tuple, list):
        items = args[:1] if origin is list or (len(args) == 2 and args[1] is Ellipsis) else args
        return bool(items) and all(_flat_annotation(a, str_only=True) for a in items)
    return False


def _with_id(draft: StoredEntry) -> StoredEntry:
    return StoredEntry(
        id=draft.compute_id(), parent=draft.parent, session=draft.session, seq=draft.seq,
        time_us=draft.time_us, kind=draft.kind, v=draft.v, payload=draft.payload, blob=draft.blob,
    )


def stored_entry(
    *, session: str, seq: int, parent: str | None, time_us: int, kind: str, v: int, payload: bytes,
    blob: bytes | None = None,
) -> StoredEntry:
    """Build an entry from raw parts (already canonical payload bytes) and give it its id."""
    return _with_id(StoredEntry("", parent, session, seq, time_us, kind, v, payload, blob))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))
