"""An import, all or nothing: read and dry-run every session of a file, then write them.

``plan_import`` reads the file (``vak_context.importers.reading``) and runs every session through a
``DryRunLedger``, which encodes and checks each entry exactly as ``LedgerStore.append`` would and
keeps none; only a plan that passed is written (``write_import``). So bad input raises
``InvalidRecording`` (or ``UnknownRecordingFormat``) naming the file and the record's line, and
leaves the ledger as it was: no session, no folder. Nothing is skipped silently: every record left
out is counted by reason in the report.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.errors import InvalidInput, InvalidRecording, LedgerError
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity
from vak_context.importers.outcome import ImportOutcome, SessionOutcome
from vak_context.importers.reading import read_recordings
from vak_context.importers.recording import Recording
from vak_context.importers.strict_json import one_line
from vak_context.importers.writer import DryRunLedger, SessionWriter, jsonable
from vak_context.storage.cardindex import CardIndex
from vak_context.storage.ledger import LedgerStore

# --tokens-per-char: a tokenizer spends at most one token per UTF-8 byte, so at most 4 per character;
# below 0.01 (100 characters a token) no tokenizer goes. Outside these a turn's size is meaningless,
# and 1e308 overflowed the size arithmetic.
MIN_TOKENS_PER_CHAR, MAX_TOKENS_PER_CHAR = 0.01, 4.0

Progress = Callable[[str, int, int], None]  # (session, events done, events in the session)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_name(hint: str) -> str:
    """A path-safe session name from a file stem or record id (see vak_context.names.check_name)."""
    name = _UNSAFE.sub("-", hint).strip("-._") or "session"
    return name[:128].rstrip("-._") or "session"


def check_tokens_per_char(value: float) -> float:
    """``value`` when it is a sane tokens-per-character ratio, else InvalidInput saying the range."""
    try:
        ratio = float(value)
    except (TypeError, ValueError, OverflowError):
        ratio = math.nan
    if not (math.isfinite(ratio) and MIN_TOKENS_PER_CHAR <= ratio <= MAX_TOKENS_PER_CHAR):
        raise InvalidInput(
            f"tokens per character must be a number from {MIN_TOKENS_PER_CHAR} to {MAX_TOKENS_PER_CHAR} "
            f"(got {value!r}); English text is about 0.25, code about 0.3"
        )
    return ratio


def existing_sessions(store: LedgerStore, names: Sequence[str]) -> list[str]:
    """The names among ``names`` that already have entries in ``store``."""
    present = set(store.sessions())
    return [n for n in names if n in present and store.head(n) is not None]


def existing_sessions_at(ledger: str | Path, names: Sequence[str]) -> list[str]:
    """``existing_sessions`` for a ledger folder, read-only: a ledger that is not there is not created."""
    if not (Path(ledger) / "sessions").is_dir():
        return []
    with LedgerStore(ledger, readonly=True) as store:
        return existing_sessions(store, names)


def refuse_existing(taken: list[str], ledger: str | Path) -> None:
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise InvalidInput(
            f"session {taken[0]!r}{more} already exists in the ledger at {ledger}; import under another name "
            "(--session NAME) or into a fresh ledger. Nothing was written"
        )


def _source_activity(rec: Recording, source_path: str) -> Activity:
    # A file name that is not UTF-8 decodes with surrogate escapes; the ledger stores UTF-8 text only.
    path = os.fsencode(source_path).decode("utf-8", "replace")
    detail = {"path": path, "format": rec.format, "recording": rec.name, **jsonable(rec.source)}
    return Activity(activity="import.source", detail=detail)


def dry_run(
    rec: Recording,
    session: str,
    *,
    mapper: Mapper | None = None,
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
    close_turns: bool = True,
    source_path: str = "",
) -> SessionOutcome:
    """Run ``rec`` through a DryRunLedger: InvalidRecording with the record's line if the ledger would
    refuse any entry of it; else the report the import will give."""
    report = SessionOutcome(session=session, format=rec.format, skipped=Counter(rec.skipped))
    writer = SessionWriter(
        DryRunLedger(mapper), session, report, tokens_per_char=tokens_per_char, close_turns=close_turns
    )
    index = -1
    try:
        writer.put(_source_activity(rec, source_path))
        writer.flush()
        for event in rec.events:
            index += 1
            writer.write(event)
            writer.flush()  # so an entry the ledger refuses is charged to the event that made it
        writer.finish()
    except (InvalidInput, ValueError, TypeError, OverflowError, RecursionError) as exc:
        line = rec.line_of(rec.origin(index)) if index >= 0 else None
        record = "the record" if line is not None else f"event #{index + 1} of recording {rec.name!r}"
        raise InvalidRecording(
            f"{record} cannot be stored in the ledger ({one_line(str(exc), 240)}); fix or remove it and "
            "import again (nothing was written)",
            path=source_path,
            line=line,
        ) from exc
    return report


def _write_recording(
    store: LedgerStore,
    rec: Recording,
    session: str,
    *,
    tokens_per_char: float,
    close_turns: bool,
    card_index: CardIndex | None,
    progress: Progress | None,
    source_path: str,
) -> SessionOutcome:
    report = SessionOutcome(session=session, format=rec.format, skipped=Counter(rec.skipped))
    writer = SessionWriter(store, session, report, tokens_per_char=tokens_per_char, close_turns=close_turns)
    writer.put(_source_activity(rec, source_path))
    total = len(rec.events)
    for i, event in enumerate(rec.events, 1):
        writer.write(event)
        if progress is not None and (i == total or i % 50 == 0):
            progress(session, i, total)
    writer.finish()
    if card_index is not None:
        card_index.add(session, writer.cards)
    return report


def import_recording(
    store: LedgerStore,
    rec: Recording,
    session: str,
    *,
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
    close_turns: bool = True,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
    source_path: str = "",
) -> SessionOutcome:
    """Write one recording as a new session, after a dry run; returns what was written and skipped."""
    tokens_per_char = check_tokens_per_char(tokens_per_char)
    refuse_existing(existing_sessions(store, [session]), store.root)
    dry_run(
        rec,
        session,
        mapper=store.mapper,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        source_path=source_path,
    )
    return _write_recording(
        store,
        rec,
        session,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        card_index=card_index,
        progress=progress,
        source_path=source_path,
    )


@dataclass
class ImportPlan:
    """A recorded-session file read, named and dry-run: every session in it can be written."""

    path: str
    format: str
    sessions: list[tuple[Recording, str]]  # (recording, session name)
    skipped: Counter[str]
    tokens_per_char: float
    close_turns: bool

    @property
    def names(self) -> list[str]:
        return [name for _, name in self.sessions]


def _session_names(recordings: list[Recording], session: str | None, stem: str) -> list[str]:
    """Session names, unique within the file: a repeat (two tau-bench items with one task and trial)
    gets ``-2``, ``-3``, ... so it cannot collide with the first halfway through an import."""
    names: list[str] = []
    seen: set[str] = set()
    for rec in recordings:
        if session is None:
            name = session_name(rec.name)
        elif len(recordings) == 1:
            name = session_name(session)
        else:
            name = session_name(session + rec.name[len(stem) :])
        unique, n = name, 1
        while unique in seen:
            n += 1
            unique = f"{name[: 128 - len(str(n)) - 1]}-{n}"
        seen.add(unique)
        names.append(unique)
    return names


def plan_import(
    path: str | Path,
    *,
    session: str | None = None,
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
    close_turns: bool = True,
    skip_bad_lines: bool = False,
    mapper: Mapper | None = None,
) -> ImportPlan:
    """Read a recorded-session file and dry-run every session in it; writes nothing, creates nothing.

    ``mapper`` is the target ledger's (its size limits); the default limits otherwise.
    """
    tokens_per_char = check_tokens_per_char(tokens_per_char)
    fmt, recordings, skipped = read_recordings(path, skip_bad_lines=skip_bad_lines)
    names = _session_names(recordings, session, Path(path).name.split(".")[0])
    mapper = mapper or Mapper()
    for rec, name in zip(recordings, names, strict=True):
        dry_run(
            rec,
            name,
            mapper=mapper,
            tokens_per_char=tokens_per_char,
            close_turns=close_turns,
            source_path=str(path),
        )
    return ImportPlan(
        str(path), fmt, list(zip(recordings, names, strict=True)), skipped, tokens_per_char, close_turns
    )


def write_import(
    store: LedgerStore,
    plan: ImportPlan,
    *,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
) -> ImportOutcome:
    """Write a plan's sessions (refused, before any write, if one of them exists already)."""
    refuse_existing(existing_sessions(store, plan.names), store.root)
    report = ImportOutcome(path=plan.path, format=plan.format, skipped=plan.skipped)
    for rec, name in plan.sessions:
        try:
            written = _write_recording(
                store,
                rec,
                name,
                tokens_per_char=plan.tokens_per_char,
                close_turns=plan.close_turns,
                card_index=card_index,
                progress=progress,
                source_path=plan.path,
            )
        except (OSError, LedgerError) as exc:
            # The dry run passed, so this is the disk or the ledger, not the recording.
            done = [s.session for s in report.sessions]
            raise LedgerError(
                f"writing session {name!r} failed ({one_line(str(exc), 200)}); it may be partly written"
                + (f", after {len(done)} complete session(s) ({done[0]!r} first)" if done else "")
                + ". Fix the cause, then import again under another --session name or into a fresh ledger"
            ) from exc
        report.sessions.append(written)
    return report


def import_path(
    store: LedgerStore,
    path: str | Path,
    *,
    session: str | None = None,
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
    close_turns: bool = True,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
    skip_bad_lines: bool = False,
) -> ImportOutcome:
    """Import every session in a recorded-session file, all or nothing (``plan_import``, then
    ``write_import``). ``session`` names it (a prefix when the file holds several sessions:
    ``<session>-<record id>``)."""
    plan = plan_import(
        path,
        session=session,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        skip_bad_lines=skip_bad_lines,
        mapper=store.mapper,
    )
    return write_import(store, plan, card_index=card_index, progress=progress)
