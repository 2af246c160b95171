"""The farm's results table: one row per (task, model, session, request), as an Arrow schema.

A *unit* is one (task, model, session) of a farm run: the work one Ray task does. Its rows travel to
the driver as one Arrow table through the object store, and the driver keeps it as one Parquet file
in the run folder (``units/<key>.parquet``) before it counts the unit as done. The run's table
(``results.parquet``) is those files concatenated.

``request`` is the request's index within the unit: the n-th model request of the recorded session
(replay), the n-th rung (probe) or the n-th repeat of a directive (live). A unit that could not run
at all (its model cannot be served, its session cannot be read) has one row with ``request = -1``,
``passed = False`` and the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

UNIT_FAILED = -1  # the ``request`` of the one row a unit that could not run writes

RESULTS_SCHEMA = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),  # probe | replay | live
    pa.field("model", pa.string(), nullable=False),
    pa.field("session", pa.string(), nullable=False),  # '' for probe
    pa.field("request", pa.int32(), nullable=False),
    pa.field("node", pa.string()),  # the Ray node id the unit ran on
    pa.field("horizon", pa.int64()),  # the profile's instruction horizon (probe: the one measured)
    pa.field("window", pa.int64()),  # the profile's declared window
    pa.field("budget", pa.int64()),  # the most tokens the request may be: plan horizon minus output reserve
    pa.field("request_tokens", pa.int64()),  # the request's size (probe: billed prompt tokens)
    pa.field("turns", pa.int32()),  # turns in the plan, the current one included
    pa.field("full_turns", pa.int32()),
    pa.field("card_turns", pa.int32()),
    pa.field("packet_turns", pa.int32()),
    pa.field("reset_turns", pa.int32()),
    pa.field("verbatim_results", pa.int32()),  # shown whole: the current turn's, and a closed turn's short ones
    pa.field("windowed_results", pa.int32()),  # shown as a window that names its recall calls
    pa.field("digested_results", pa.int32()),  # a digest or a card that names the evidence id
    pa.field("packeted_results", pa.int32()),  # named in a compaction packet
    pa.field("reset_results", pa.int32()),  # behind a reset-with-handoff (recall still returns them)
    pa.field("missing_results", pa.int32()),  # in none of those forms: a no-cut violation
    pa.field("packet_first", pa.int32()),  # the packet's turn range, when the plan has one
    pa.field("packet_last", pa.int32()),
    pa.field("cache_tokens", pa.int64()),  # probe/live: cached tokens reported; replay: shared prefix
    pa.field("wall_ms", pa.float64()),
    pa.field("passed", pa.bool_(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),  # why it failed ('' when it passed), or a note
    pa.field("detail", pa.string()),  # JSON: what else the task measured (the directive, the plan digest)
])
COLUMNS: tuple[str, ...] = tuple(RESULTS_SCHEMA.names)


@dataclass(frozen=True)
class UnitKey:
    """One unit of a farm run. Each part is a checked name, so ``file_name`` is a safe path component."""

    task: str
    model: str
    session: str = ""

    @property
    def file_name(self) -> str:
        return f"{self.task}--{self.model}--{self.session or '_'}"

    def __str__(self) -> str:
        return f"{self.task}/{self.model}" + (f"/{self.session}" if self.session else "")


def make_row(unit: UnitKey, kind: str, run_id: str, request: int, *, passed: bool, reason: str = "",
             detail: dict[str, Any] | None = None, **figures: Any) -> dict[str, Any]:
    """A row with every column: the figures given, None for the rest."""
    unknown = set(figures) - set(COLUMNS)
    if unknown:
        raise KeyError(f"not columns of the results table: {sorted(unknown)}")
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(figures)
    row.update(run_id=run_id, task=unit.task, kind=kind, model=unit.model, session=unit.session, request=request,
               passed=passed, reason=reason, detail=json.dumps(detail or {}, sort_keys=True, default=str))
    return row


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)


def failed_unit_table(unit: UnitKey, kind: str, run_id: str, reason: str, node: str | None = None) -> pa.Table:
    """The one row of a unit that could not run."""
    return rows_table([make_row(unit, kind, run_id, UNIT_FAILED, passed=False, reason=reason, node=node)])
