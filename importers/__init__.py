"""Import recorded agent sessions into the ledger (`vak import PATH`).

One module per format, each with ``sniff(doc)`` and ``parse(doc)`` (the recorded sessions' README
in ``shared/data/trajectories`` describes each), registered by name in ``registry``:

* ``claude_code``: Claude Code session JSONL (a ``parentUuid`` tree, one record per content block);
* ``openai_chat``: OpenAI Chat Completions messages with ``tool_calls`` (JSON or JSONL);
* ``tau_bench``: a JSON array of ``{task_id, trial, reward, info, traj}`` sessions;
* ``openhands``: OpenHands eval output, JSONL with one event stream (``history``) a line;
* ``mini_swe_agent``: a ``.traj.json`` whose actions are fenced ```bash blocks in the text;
* ``swe_agent``: a ``.traj`` with ``history`` chat messages and ``trajectory`` steps.

``reading`` reads a file and asks each format's ``sniff`` in the registry's order; the first to
claim it parses it into neutral events (``recording``). ``writer`` turns the events into ledger
entries, and ``pipeline`` makes an import all or nothing: every session is dry-run before any is
written. This package's names below are the API the CLI, the farm and the tests use.
"""

from __future__ import annotations

from vak_context.importers.outcome import ImportOutcome, SessionOutcome
from vak_context.importers.pipeline import (
    MAX_TOKENS_PER_CHAR,
    MIN_TOKENS_PER_CHAR,
    ImportPlan,
    Progress,
    check_tokens_per_char,
    dry_run,
    existing_sessions,
    existing_sessions_at,
    import_path,
    import_recording,
    plan_import,
    refuse_existing,
    session_name,
    write_import,
)
from vak_context.importers.reading import read_recordings
from vak_context.importers.recording import (
    CompactionMark,
    ControlText,
    Event,
    ModelStep,
    Note,
    Recording,
    SystemPrompt,
    ToolOutput,
    UserText,
)
from vak_context.importers.registry import FORMATS, REGISTRY, detect
from vak_context.importers.writer import DryRunLedger, EntrySink, SessionWriter

__all__ = [
    "FORMATS",
    "MAX_TOKENS_PER_CHAR",
    "MIN_TOKENS_PER_CHAR",
    "REGISTRY",
    "CompactionMark",
    "ControlText",
    "DryRunLedger",
    "EntrySink",
    "Event",
    "ImportOutcome",
    "ImportPlan",
    "ModelStep",
    "Note",
    "Progress",
    "Recording",
    "SessionOutcome",
    "SessionWriter",
    "SystemPrompt",
    "ToolOutput",
    "UserText",
    "check_tokens_per_char",
    "detect",
    "dry_run",
    "existing_sessions",
    "existing_sessions_at",
    "import_path",
    "import_recording",
    "plan_import",
    "read_recordings",
    "refuse_existing",
    "session_name",
    "write_import",
]
