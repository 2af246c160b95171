"""The files of a session's search index that every reader and writer agrees on: its state file (the format,
the last entry indexed, the documents counted), how the index folder is opened, which entry kinds it indexes,
and where a catch-up in this process left it (``Resume``) so the next one reads only the entries after it.

Apart from :mod:`vak_context.storage.search` (the index itself) so that the catch-up worker
(:mod:`vak_context.storage.catchup`), which drives a ``WriterIndex``, and the index share these without importing
each other both ways."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whoosh.filedb.filestore import FileStorage  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it

if TYPE_CHECKING:
    from vak_context.context.history.searchdocs import SearchDoc, SessionDocs
    from vak_context.events.envelope import StoredEntry

STATE_FILE = "vak-state.json"
# 2: recall and session_search results are not indexed; 3: one-character terms are indexed (vak_context.bm25);
# 4: only the text is indexed, without positions (storage/search.py ``schema``). An index of an older format is
# rebuilt on open.
SEARCH_FORMAT = "vak-search/4"
INDEXED_KINDS = frozenset({"directive", "evidence_body", "turn_card", "presentation"})


def _raw_state(folder: Path) -> Any:
    try:
        return json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stale_format(folder: Path) -> str | None:
    """The format an index of another version states (it is rebuilt), or None."""
    state = _raw_state(folder)
    stated = state.get("format") if isinstance(state, dict) else None
    return stated if isinstance(stated, str) and stated != SEARCH_FORMAT else None


def read_state(folder: Path) -> dict[str, Any] | None:
    state = _raw_state(folder)
    if not isinstance(state, dict) or state.get("format") != SEARCH_FORMAT:
        return None
    return state


def write_state(folder: Path, session: str, seq: int, entry_id: str | None, docs: int) -> None:
    """Replace the state atomically: a crash leaves the old one or the new one."""
    tmp = folder / f"_tmp-{STATE_FILE}"
    data = json.dumps({"format": SEARCH_FORMAT, "session": session, "seq": seq, "id": entry_id, "docs": docs})
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / STATE_FILE)


def open_dir(folder: Path) -> Any:
    """The index in ``folder``, its segment files read, not mapped.

    whoosh maps a segment file and, each time a reader opens, copies every part of it into a ``BytesIO``
    (``BufferFile``), the stored text included: every searcher paid for copying the whole session's index
    (bench/search.py, a fresh searcher per query: 28 ms at 10k documents, 219 ms at 100k, against 7 and 39 ms
    with one searcher kept open). Unmapped, a part is a window on the open file, read where a query needs it.
    (Separate segment files, ``compound=False``, would avoid the copy too, but whoosh-ng's own check on open
    rejects the empty postings file a small segment has: ``Segment file ... is empty``.)"""
    return FileStorage(str(folder), supports_mmap=False).open_index()


@dataclass
class Resume:
    """Where a catch-up in this process left a session's index (``WriterIndex.resume_point``): the last entry
    indexed and the documents' turn count there, so the next catch-up reads only the entries after it."""

    seq: int
    entry_id: str | None
    docs: SessionDocs


def open_resumed(store: Any, session: str, folder: Path,
                 resume: Resume) -> tuple[Any, dict[str, Any], list[StoredEntry], int] | None:
    """The open index, its state, the entries after ``resume.seq`` and that entry's seq + 1,
    when the index is where ``resume`` says (its state names that entry, the ledger holds it there and whoosh
    holds the documents the state counts); None where anything else wrote it since (open it whole)."""
    state = read_state(folder)
    if (state is None or state.get("session") != session or state.get("seq") != resume.seq
            or state.get("id") != resume.entry_id):
        return None
    base = resume.seq + 1
    tail = store.entries(session, resume.seq if resume.seq >= 0 else 0)
    if resume.seq >= 0 and (not tail or tail[0].id != resume.entry_id):
        return None
    tail = [e for e in tail if e.seq >= base]
    try:
        ix = open_dir(folder)
        # The count from the table of contents: this process's last catch-up wrote these files, so opening
        # a reader of every segment to prove they open (``check_index``, ~5 ms at 1,000 turns) is left to a
        # whole open: a file torn since is found by the next one (a search, ``vak verify``), which rebuilds.
        count = sum(segment.doc_count() for segment in ix._segments())
    except Exception:  # torn files: the whole open says why and rebuilds
        return None
    if count != state.get("docs"):
        ix.close()
        return None
    return ix, state, tail, base


def docs_after(store: Any, tail: Sequence[StoredEntry], docs: SessionDocs) -> Iterator[SearchDoc]:
    """The documents of ``tail`` (``docs`` already counts the turns before it)."""
    for entry in tail:
        if entry.kind in INDEXED_KINDS:
            yield from docs.add(entry.seq, entry.id, store.mapper.payload_of(entry), entry.blob)
