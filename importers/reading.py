"""Reading a recorded-session file: JSON Lines or one JSON document, strictly, then its format.

NaN, infinities, numbers too large for a float and lone surrogates are refused with the record's
line, never stored as ``null`` or as text that is not UTF-8 (see ``vak_context.importers.strict_json``). A file
that is not UTF-8, a line that is not JSON (unless skipped, and counted) or a record with the
wrong shape raise ``InvalidRecording`` naming the file and line; a file no format claims raises
``UnknownRecordingFormat``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from vak_context.errors import InvalidRecording, UnknownRecordingFormat
from vak_context.importers.base import Document
from vak_context.importers.recording import Recording
from vak_context.importers.registry import FORMATS, detect
from vak_context.importers.strict_json import (
    RecordShapeError,
    Where,
    first_bad_value,
    kind_of,
    line_of_depth,
    line_of_path,
    loads,
    one_line,
)

_FIX = "fix or remove that record and import again (nothing was written)"


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> InvalidRecording:
    return InvalidRecording(
        f"the file is not UTF-8 text (bad byte at offset {exc.start}); convert it to UTF-8 first",
        path=str(path),
    )


def _read_jsonl(path: Path, skip_bad_lines: bool, skipped: Counter[str]) -> list[tuple[int, Any]]:
    rows = []
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    value = loads(line)
                except (ValueError, RecursionError) as exc:
                    if skip_bad_lines:
                        skipped["line that is not JSON"] += 1
                        continue
                    what = (
                        f"{exc.msg} at column {exc.colno}"
                        if isinstance(exc, json.JSONDecodeError)
                        else "nested too deeply"
                        if isinstance(exc, RecursionError)
                        else one_line(str(exc), 120)
                    )
                    raise InvalidRecording(
                        f"line is not JSON ({what}). Fix or remove the line, or pass "
                        "--skip-bad-lines to import the rest and count it as skipped",
                        path=str(path),
                        line=n,
                    ) from exc
                bad = first_bad_value(value)
                if bad is not None:
                    raise InvalidRecording(f"{bad[1]}; {_FIX}", path=str(path), line=n)
                rows.append((n, value))
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from exc
    return rows


def _read_json(path: Path) -> tuple[Any, str]:
    """The document and its text (kept to find a record's line when one is refused)."""
    try:
        text = path.read_text(encoding="utf-8")
        if text.lstrip()[:1] not in ("{", "["):
            raise UnknownRecordingFormat(str(path), "neither JSON nor JSON Lines", list(FORMATS))
        data = loads(text)
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from exc
    except json.JSONDecodeError as exc:
        raise InvalidRecording(
            f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); if it is JSON Lines, "
            "give it a .jsonl name",
            path=str(path),
            line=exc.lineno,
        ) from exc
    except (ValueError, RecursionError) as exc:
        deep = isinstance(exc, RecursionError)
        what = "nested too deeply" if deep else one_line(str(exc), 120)
        raise InvalidRecording(
            f"not JSON the importer can read ({what}); fix the file and import again",
            path=str(path),
            line=line_of_depth(text) if deep else None,
        ) from exc
    bad = first_bad_value(data)
    if bad is not None:
        raise InvalidRecording(f"{bad[1]}; {_FIX}", path=str(path), line=line_of_path(text, bad[0]))
    return data, text


def _looks_like_jsonl(path: Path) -> bool:
    if path.suffix == ".jsonl":
        return True
    with path.open("rb") as fh:
        head = fh.read(1 << 16).lstrip()
    if head.startswith(b"["):
        return False
    first, _, rest = head.partition(b"\n")
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return bool(rest.strip())


def read_recordings(
    path: str | Path, *, skip_bad_lines: bool = False
) -> tuple[str, list[Recording], Counter[str]]:
    """(format, recordings, skipped) for a recorded-session file, by content, not by file name.

    The file is read as JSON Lines or as one JSON document; each format's sniff is asked in the
    registry's order, and the first that claims it parses it. A record with the wrong shape raises
    ``InvalidRecording`` with its line.
    """
    p = Path(path)
    skipped: Counter[str] = Counter()
    doc, line_of = read_document(p, skip_bad_lines=skip_bad_lines, skipped=skipped)
    fmt = detect(doc)
    if fmt is None:
        raise UnknownRecordingFormat(str(p), doc.describe(), list(FORMATS))
    try:
        recordings = fmt.parse(doc)
    except RecordShapeError as exc:
        raise InvalidRecording(f"{exc.message}; {_FIX}", path=str(p), line=line_of(exc.where)) from exc
    for rec in recordings:
        rec.line_of = line_of
    return fmt.name, recordings, skipped


def read_document(
    path: Path, *, skip_bad_lines: bool = False, skipped: Counter[str] | None = None
) -> tuple[Document, Callable[[Where], int | None]]:
    """The file as a ``Document`` (JSON Lines objects, or one JSON document, by content), and how
    a ``Where`` in it becomes its line. Lines left out under ``skip_bad_lines`` count in ``skipped``."""
    if not path.is_file():
        raise InvalidRecording("no such file; give the path of a recorded session file", path=str(path))
    stem = path.name.split(".")[0]
    if _looks_like_jsonl(path):
        rows = _jsonl_objects(path, skip_bad_lines, Counter() if skipped is None else skipped)
        return Document(stem, rows=rows), _jsonl_line
    data, text = _read_json(path)
    return Document(stem, data=data), partial(line_of_path, text)


def _jsonl_objects(p: Path, skip_bad_lines: bool, skipped: Counter[str]) -> list[tuple[int, dict[str, Any]]]:
    """The file's JSON Lines objects, (line number, object); a line that is another JSON value is
    refused, or with ``skip_bad_lines`` counted. A file with no object in it is no recording."""
    rows = _read_jsonl(p, skip_bad_lines, skipped)
    objs = [(n, r) for n, r in rows if isinstance(r, dict)]
    if len(objs) != len(rows):
        if not skip_bad_lines and objs:
            n, r = next((n, r) for n, r in rows if not isinstance(r, dict))
            raise InvalidRecording(
                f"the line is {kind_of(r)}, not a JSON object: every line of a recording is one record. "
                "Fix or remove the line, or pass --skip-bad-lines to import the rest and count it as skipped",
                path=str(p),
                line=n,
            )
        skipped["JSONL line that is not an object"] += len(rows) - len(objs)
    if not objs:
        raise UnknownRecordingFormat(str(p), "no JSON objects in it", list(FORMATS))
    return objs


def _jsonl_line(where: Where) -> int | None:
    """A JSON Lines record's line: the first element of its ``Where``."""
    return where[0] if where and isinstance(where[0], int) else None
