"""The farm's sessions, each in a ledger of its own inside the run folder.

``materialise(entry, ledgers)`` writes a spec's session once into ``ledgers/<name>/`` (the session is
named ``<name>`` there): a recording through ``vak_context.importers`` (any format ``vak import`` reads), a
ledger session copied entry by entry (the operator's ledger is only read), a generated session from
``vak_context.sessions.generator``. It records the session's last original entry (``source_head``) in
``ledgers/<name>.json``: replays walk the chain up to it, so what replays and live runs append later
(plans, packets) never changes what a later unit replays. A second call finds the marker and returns it.

``fork(source_root, session, dest, before_turn)`` copies a session's original chain into a new ledger,
stopping before a turn's directive when asked: each live repeat runs from the same history.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from vak_context.errors import FarmSpecError, InvalidInput, LedgerError
from vak_context.farm.spec import SessionEntry
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.ledger_copy import copy_entries


@dataclass(frozen=True)
class Materialised:
    name: str
    root: Path  # the ledger folder
    source_head: str  # the last entry of the session as materialised
    system: str  # the recorded system prompt ('' when none)
    entries: int


def _marker(ledgers: Path, name: str) -> Path:
    return ledgers / f"{name}.json"


def materialise(entry: SessionEntry, ledgers: Path) -> Materialised:
    """The session's ledger in ``ledgers``, written now unless a finished one is already there."""
    marker = _marker(ledgers, entry.name)
    root = ledgers / entry.name
    if marker.is_file():
        data = json.loads(marker.read_text(encoding="utf-8"))
        return Materialised(entry.name, root, data["source_head"], data["system"], data["entries"])
    if root.exists():  # a materialisation that died half way: start it again
        shutil.rmtree(root)
    ledgers.mkdir(parents=True, exist_ok=True)
    with LedgerStore(root) as store:
        _write(entry, store)
        head = store.head(entry.name)
        if head is None:
            raise FarmSpecError(f"session {entry.name!r} came out empty: its source holds no entries. "
                                "Point it at a recording or ledger session with at least one turn.")
        chain = store.chain_to_root(head)
    from vak_context.context.planner.view import SessionView
    from vak_context.engine.plan_comparison import recorded_system_prompt

    system = recorded_system_prompt(SessionView.build(chain))
    done = Materialised(entry.name, root, head, system, len(chain))
    tmp = marker.with_suffix(".json.part")
    tmp.write_text(json.dumps({"source_head": head, "system": system, "entries": len(chain),
                               "kind": entry.kind, "source": str(entry.path or "")}), encoding="utf-8")
    os.replace(tmp, marker)
    return done


def _write(entry: SessionEntry, store: LedgerStore) -> None:
    if entry.kind == "generated":
        from vak_context.sessions.generator import generate_session

        generate_session(seed=entry.seed, turns=entry.turns,
                         append=lambda p, b: store.append_one(entry.name, p, blob=b))
        return
    assert entry.path is not None
    if entry.kind == "recording":
        from vak_context.importers import import_recording, read_recordings

        _fmt, recordings, _skipped = read_recordings(entry.path)
        chosen = [r for r in recordings if r.name.endswith(entry.select)] if entry.select else recordings[:1]
        if not chosen:
            names = ", ".join(r.name for r in recordings[:8])
            raise FarmSpecError(f"no recording in {entry.path} has a name ending in {entry.select!r} "
                                f"(its recordings: {names}). Fix select = \"...\" in [[sessions]] {entry.name!r}.")
        import_recording(store, chosen[0], entry.name, source_path=str(entry.path))
        return
    try:
        with LedgerStore(entry.path, readonly=True) as source:
            head = source.head(entry.session)
            if head is None:
                raise FarmSpecError(f"the ledger at {entry.path} has no session {entry.session!r}: "
                                    f"it has {source.sessions()[:8]}. Fix session = \"...\".")
            copy_entries(source.chain_to_root(head), source.mapper.payload_of, entry.name,
                         lambda s, p, b: store.append_one(s, p, blob=b))
    except LedgerError as exc:
        raise FarmSpecError(f"cannot read session {entry.session!r} from {entry.path}: {exc}") from exc


def fork(source_root: Path, session: str, source_head: str, dest: Path, before_turn: int | None = None) -> str:
    """Copy ``session``'s chain up to ``source_head`` into a new ledger at ``dest``; return the text of the
    directive of turn ``before_turn`` (the chain stops before it), or '' when it copies the whole chain."""
    if dest.exists():
        shutil.rmtree(dest)  # a retried unit: what the dead attempt wrote goes
    from vak_context.context.history.turns import TurnIndex

    with LedgerStore(source_root, readonly=True) as source:
        chain = source.chain_to_root(source_head)
        stop, text = len(chain), ""
        if before_turn is not None:
            index = TurnIndex.build(chain, mapper=source.mapper)
            if not 1 <= before_turn <= len(index.turns):
                raise InvalidInput(f"session {session!r} has {len(index.turns)} turns, so it has no turn "
                                   f"{before_turn}: fix turns = [...] in the live task.")
            turn = index.turn(before_turn)
            text = turn.directive.text
            stop = next(i for i, e in enumerate(chain) if e.id == turn.id)
        with LedgerStore(dest) as store:
            copy_entries(chain[:stop], source.mapper.payload_of, session, lambda s, p, b: store.append_one(s, p, blob=b))
    return text
