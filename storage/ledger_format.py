"""The ledger format's version: one number for the whole folder layout, and what each version added.

A version adds what older code may ignore and newer code reads old ledgers without: format 1's segments and
manifests stay as they are (their own ``vak.ledger.format`` schema metadata and manifest ``format`` keep
their values), so a format-1 ledger is a format-2 ledger whose index files are not written yet, and the
first store that opens it writes them (docs/LEDGER_FORMAT.md, "Format versions"). A change that needs a
version bump adds its line to ``FORMATS`` (several changes of one release share one version) and writes
``LEDGER_FORMAT`` into what it adds; a reader given a version above ``LEDGER_FORMAT`` treats that file as
absent (rebuilding what it can from the entries) rather than guessing at it.
"""

from __future__ import annotations

LEDGER_FORMAT = 2

# What each version brought, oldest first (docs/LEDGER_FORMAT.md says the same in prose).
FORMATS: dict[int, str] = {
    1: "sessions of hash-linked entries in Arrow IPC segments, a tail per writer, a manifest per session",
    2: "a per-session index (_index.json): the session's head and its newest capacity_profile entry per model key; "
       "plan entries (schema v2) whose rows are what changed since the model's plan entry before them; "
       "compaction entries that name their evidence by their range (covered_evidence null)",
}


def readable(version: object) -> bool:
    """Whether this code reads a file written at ``version`` (an int from 1 to ``LEDGER_FORMAT``)."""
    return isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= LEDGER_FORMAT
