"""Every error vak-context raises on purpose, in one hierarchy.

Library errors (pyarrow, pydantic, httpx, Ray, OS) are translated at the edge with
``raise ... from exc`` so callers catch these types, never a library's. Each message
says what went wrong and what to do next.

::

    VakError
    ├── InvalidInput                  bad input from a caller; nothing was written
    │   ├── UnknownKind               an entry kind the event model does not know
    │   ├── InvalidUtf8               text that is not valid UTF-8 (or a lone surrogate)
    │   ├── InvalidName               a session / model / file name that cannot become a path
    │   ├── OversizeEntry             an entry over the ledger's size limits
    │   ├── NonCanonicalValue         a value canonical JSON cannot encode (NaN, bytes, ...)
    │   ├── InvalidPayload            a payload that fails its schema
    │   ├── UnknownCardType           a card type or emit_*_card tool the card library does not define
    │   ├── InvalidCardDefinition     a card-definition schema that is malformed
    │   ├── InvalidRecording          a recorded session file that cannot be imported (broken JSON line, ...)
    │   │   └── UnknownRecordingFormat  a file in none of the formats `vak import` reads
    │   ├── InvalidRules              a rules setting (rules=, --rules, X-Vak-Rules) that is not one: names the allowed values
    │   └── FarmSpecError             a farm spec (TOML) that is wrong: names the file, line and key
    ├── LedgerError                   the ledger store
    │   ├── UnknownParent             a parent id that is not in the session
    │   ├── ChainMoved                entries a caller chained itself (at=) no longer continue the session
    │   ├── UnknownEntry              an entry id (or seq range) that is not in the ledger
    │   ├── UnknownSession            a session the ledger has never seen
    │   ├── SessionLocked             another writer holds the session (one writer per session)
    │   ├── LedgerClosed              the store was closed
    │   ├── LedgerPathError           a ledger path that is a file, unreadable, or a symlinked session folder
    │   └── LedgerCorrupt             stored bytes that do not decode or do not hash to their id
    ├── ProviderError                 a model provider call (providers/)
    │   ├── ContextOverflow           the prompt is over the model's window (carries the sizes)
    │   ├── RetryableProviderError    429, 5xx, timeouts and dropped connections: retry with backoff
    │   ├── ProviderRequestError      any other 4xx: the request itself is wrong
    │   └── TokenCountError           a tokenizer endpoint answered something that is not a count
    ├── ModelServerError              the local llama.cpp server cannot start or is not reachable
    ├── RequestTooLarge               even the most compact request for the current turn is over the budget
    ├── ConfigError                   the operator's TOML config is wrong
    ├── ActorError                    a Ray actor cannot be reached, started or answer (map_ray_errors)
    ├── MissingExtra                  an optional part of the install is missing: names the extra to install
    └── ToolFailure                   a tool call that cannot run; returned to the model as an error result
        └── McpError                  an MCP server did not start, or broke the protocol
"""

from __future__ import annotations

from typing import Any


class VakError(Exception):
    """Base of every error vak-context raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take their own arguments (often keyword-only), so the default pickling, which calls
        # ``cls(*args)``, cannot rebuild them. Errors cross processes (Ray actors), so rebuild from state.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[VakError], args: tuple[Any, ...], state: dict[str, Any]) -> VakError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# ---------------------------------------------------------------- bad input


class InvalidInput(VakError):
    """Bad input from a caller. Nothing was written."""


class InvalidBody(InvalidInput):
    """A request body ``vak serve`` refuses before anything reads it into a session: not JSON, too large or
    too deep, the wrong content type, sent too slowly, or a field of the wrong shape (the message names the
    field, as ``messages[2].tool_calls[0].function: required``). ``status`` is the HTTP status it answers
    with (400, 408, 413 or 415). Nothing was written."""

    def __init__(self, message: str, status: int = 400) -> None:
        self.status = status
        super().__init__(message)


class UnknownKind(InvalidInput):
    def __init__(self, kind: object, known: list[str] | None = None) -> None:
        self.kind = kind
        hint = f" Known kinds: {', '.join(known)}." if known else ""
        super().__init__(f"unknown entry kind {kind!r}.{hint} Check the payload's 'kind' field.")


class InvalidUtf8(InvalidInput):
    def __init__(self, where: str, detail: str = "") -> None:
        self.where = where
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{where} is not valid UTF-8{extra}. Store raw bytes as an evidence body (blob), "
            "or decode the text with errors='replace' before appending it."
        )


class InvalidName(InvalidInput):
    def __init__(self, what: str, name: object, rule: str) -> None:
        self.name = name
        super().__init__(f"invalid {what} {name!r}: {rule}")


class OversizeEntry(InvalidInput):
    def __init__(self, part: str, size: int, limit: int) -> None:
        self.part, self.size, self.limit = part, size, limit
        super().__init__(
            f"entry {part} is {size:,} bytes, over the ledger limit of {limit:,} bytes. "
            "Store large tool output as an evidence body (it takes up to the blob limit), "
            "or raise the limit with LedgerLimits."
        )


class NonCanonicalValue(InvalidInput):
    """A value that canonical JSON cannot encode exactly once (NaN, infinities, bytes, ...)."""


class InvalidPayload(InvalidInput):
    """A payload that does not validate against its kind's schema."""


class UnknownCardType(InvalidInput):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(
            f"no card type or card tool {name!r} in the card library. Known: {', '.join(known)}. "
            "Use one of these, or add a definition to context/history/card_defs/."
        )


class InvalidCardDefinition(InvalidInput):
    """A card definition (JSON Schema plus its ``x-vak-card`` block) that is malformed."""


class InvalidRecording(InvalidInput):
    """A recorded agent session that cannot be imported. ``path`` and ``line`` say where."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        self.path, self.line = path, line
        where = f"{path}:{line}: " if path and line is not None else f"{path}: " if path else ""
        super().__init__(f"{where}{message}")


class UnknownRecordingFormat(InvalidRecording):
    def __init__(self, path: str, detail: str, formats: list[str]) -> None:
        super().__init__(
            f"not a recorded session in a format vak can import ({detail}). Known formats: {', '.join(formats)}. "
            "Pass a Claude Code session JSONL, OpenAI chat messages with tool_calls (JSON or JSONL), a tau-bench "
            "results array, OpenHands output.jsonl, a mini-swe-agent .traj.json or a SWE-agent .traj.",
            path=path,
        )


class InvalidRules(InvalidInput):
    """A rules setting (``rules=``, ``--rules``, ``vak serve``'s ``X-Vak-Rules`` header) that is not one."""

    def __init__(self, got: str, modes: tuple[str, ...], rules: tuple[str, ...]) -> None:
        self.got = got
        super().__init__(
            f"rules={got} is not a rules setting: give a mode ({', '.join(modes)}), optionally followed by "
            f"per-rule overrides RULE=MODE separated by commas (e.g. 'observe,freshness-check=enforce'); "
            f"the rules are {', '.join(rules)} (docs/DRIFT.md)")


class FarmSpecError(InvalidInput):
    """A farm spec that cannot be run. ``path``, ``line`` and ``key`` say where; the message says the fix."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None, key: str = "") -> None:
        self.path, self.line, self.key = path, line, key
        where = f"{path}:{line}: " if path and line is not None else f"{path}: " if path else ""
        at = f"{key}: " if key else ""
        super().__init__(f"{where}{at}{message}")


# ---------------------------------------------------------------- ledger


class LedgerError(VakError):
    """Errors of the ledger store."""


class UnknownParent(LedgerError):
    def __init__(self, parent: str, session: str) -> None:
        self.parent, self.session = parent, session
        super().__init__(
            f"parent {parent!r} is not an entry of session {session!r}. "
            "Pass parent=None to chain onto the session head, or an id returned by append()."
        )


class ChainMoved(LedgerError):
    """Entries a caller chained itself (``vak_context.events.envelope.At``) no longer continue the session: another
    append reached its head first. Nothing of that append was written."""

    def __init__(self, session: str, parent: str | None, seq: int, head: str | None, next_seq: int) -> None:
        self.session, self.parent, self.seq = session, parent, seq
        super().__init__(
            f"session {session!r} moved on: entries chained after {parent!r} at seq {seq}, but its head is {head!r} "
            f"at seq {next_seq}. Read the session again (or append at its head, without at=) and retry."
        )


class UnknownEntry(LedgerError):
    def __init__(self, what: str) -> None:
        super().__init__(f"no such entry: {what}. Ids are 64 hex characters returned by append().")


class UnknownSession(LedgerError):
    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"no session {session!r} in this ledger. List sessions with sessions().")


class SessionLocked(LedgerError):
    def __init__(self, session: str, path: str) -> None:
        self.session = session
        super().__init__(
            f"session {session!r} already has a writer ({path} is locked): another engine or process has it "
            "open, and a session has one writer. Close it there (`await session.close()`, `engine.close()`, "
            "or end the `vak` command that uses it) or give this conversation another session name; to write "
            "one folder from several processes, open it on Ray in each (`Engine.open(folder, ray=...)`)."
        )


class LedgerClosed(LedgerError):
    def __init__(self) -> None:
        super().__init__("the ledger store is closed. Open a new LedgerStore on the same folder.")


class LedgerPathError(LedgerError):
    """A ledger path that cannot be used as one: a file where a folder belongs, a folder without
    permission, or a session folder that is a symlink (followed, it would read or write elsewhere)."""

    def __init__(self, path: object, problem: str, hint: str) -> None:
        self.path = str(path)
        super().__init__(f"{path} {problem}. {hint}")


class LedgerCorrupt(LedgerError):
    """Stored bytes that do not decode, or do not hash to their id.

    ``position`` names where: session, segment file, batch index, row, and seq when known.
    """

    def __init__(self, message: str, position: dict[str, Any] | None = None) -> None:
        self.position = position or {}
        super().__init__(f"{message}. Run `vak verify <ledger>` for the full report.")


# ---------------------------------------------------------------- providers


class ProviderError(VakError):
    """A model provider call failed."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        self.provider, self.status = provider, status
        super().__init__(message)


class ContextOverflow(ProviderError):
    """The prompt is over what the provider accepts. Carries the sizes when the provider said them."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = 400,
        prompt_tokens: int | None = None,
        limit_tokens: int | None = None,
    ) -> None:
        self.prompt_tokens, self.limit_tokens = prompt_tokens, limit_tokens
        super().__init__(message, provider=provider, status=status)


class RetryableProviderError(ProviderError):
    """429, 5xx, timeouts: safe to retry with backoff."""

    def __init__(
        self, message: str, *, provider: str = "", status: int | None = None, retry_after: float | None = None
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, provider=provider, status=status)


class ProviderRequestError(ProviderError):
    """Any other provider error: the request itself is wrong (auth, schema, model name)."""


class TokenCountError(ProviderError):
    """A server's tokenizer endpoint (llama.cpp ``/apply-template``, ``/tokenize``) answered 2xx with a
    body that is not what it documents, so the request cannot be sized exactly (``providers/tokencount.py``).
    The counter catches it and sizes by the calibrated estimate instead: it never fails a turn."""


# ---------------------------------------------------------------- the rest


class RequestTooLarge(VakError):
    """Even the current turn's most compact form does not fit the bound model's budget: nothing is sent.

    ``needed`` and ``available`` are tokens; the message says what to do next.
    """

    def __init__(self, message: str, *, needed: int, available: int) -> None:
        self.needed, self.available = needed, available
        super().__init__(message)


class ModelServerError(VakError):
    """The local llama.cpp server could not start, or is not reachable."""


class ConfigError(VakError):
    """The operator's TOML config is wrong."""


class ActorError(VakError):
    """A Ray actor could not be reached or started, or Ray failed a call to it.

    Raised by ``vak_context.actors.ray_errors.map_ray_errors`` wherever the project waits on one of its actors
    (the message names the call and what to do); an actor's own ``VakError`` passes through as itself.
    """


class MissingExtra(VakError):
    """An optional part of the install (a pyproject extra) that this call needs is not installed."""

    def __init__(self, extra: str, what: str) -> None:
        self.extra, self.what = extra, what
        super().__init__(f"{what} needs the `{extra}` extra, which is not installed: "
                         f"pip install 'vak-context[{extra}]' (or `make install`, which installs every extra).")


class AppendOnlyHistory(InvalidInput):
    """A framework asked to remove or rewrite what the ledger already holds (an adapter's session ``pop_item``
    or ``clear_session``, a history edited between calls): the ledger only appends."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what}: the context engine's ledger is append-only, so nothing it recorded can be "
                         "removed or rewritten; to start over, use a new session name (the old one stays readable)")


class TurnOver(VakError):
    """A framework asked for another model call in a turn the engine has already closed (its rules closed
    it, or not even its most compact request fits the model)."""

    def __init__(self, outcome: str, answer: str) -> None:
        self.outcome, self.answer = outcome, answer
        super().__init__(f"the engine closed this turn ({outcome}: {answer[:200]!r}) while the framework asked "
                         "for another model call; end the framework's run here and send the next user message")


class ToolFailure(VakError):
    """A tool call that cannot run (bad arguments, a path outside the workspace, a missing file).

    The turn loop returns the message to the model as an error tool result, so it names the
    fix the model can make.
    """

    def __init__(self, tool: str, reason: str) -> None:
        self.tool, self.reason = tool, reason
        super().__init__(f"{tool}: {reason}")


class McpError(ToolFailure):
    """An MCP server that did not start, stopped, or answered outside the protocol. ``tool`` names the
    server's tool (or the server); the message says what to check (its command, its stderr)."""

