"""vak-context: a context engine for LLM agents.

``import vak_context`` gives the public API (:mod:`vak_context.engine.api`: ``Engine``, ``Session``,
``TurnResult``, ...), the tool registry and every public error. The names are resolved on first use
(PEP 562), so importing the package starts nothing and imports neither Ray nor pyarrow. docs/EMBEDDING.md
lists what is public and how a public name is deprecated.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it. Everything here is public; everything else is internal.
_API = "vak_context.engine.api"
_ASSEMBLE = "vak_context.context.request.assemble"
_ERRORS = "vak_context.errors"
_TOOLS = "vak_context.agent.tools.registry"
_PUBLIC: dict[str, str] = {
    "Action": _API, "Call": _API, "Card": _API, "Engine": _API, "ModelRequest": _API, "Session": _API,
    "Stated": _API, "Step": _API, "Turn": _API, "TurnResult": _API,
    "DEFAULT_IDENTITY": _ASSEMBLE, "DEFAULT_STANCE": _ASSEMBLE,
    "Tool": _TOOLS, "ToolRegistry": _TOOLS, "tool": _TOOLS,
    **{name: _ERRORS for name in (
        "ActorError", "AppendOnlyHistory", "ChainMoved", "ConfigError", "ContextOverflow", "FarmSpecError", "InvalidBody", "InvalidCardDefinition", "InvalidInput",
        "InvalidName", "InvalidPayload", "InvalidRecording", "InvalidRules", "InvalidUtf8", "LedgerClosed", "LedgerCorrupt",
        "LedgerError", "LedgerPathError", "McpError", "MissingExtra", "ModelServerError", "NonCanonicalValue",
        "OversizeEntry", "ProviderError", "ProviderRequestError", "RequestTooLarge", "RetryableProviderError",
        "SessionLocked", "TokenCountError", "ToolFailure", "TurnOver", "UnknownCardType", "UnknownEntry", "UnknownKind",
        "UnknownParent", "UnknownRecordingFormat", "UnknownSession", "VakError")},
}
# Public names on their way out: name -> (the module that still defines it, what to use instead). Each
# warns (DeprecationWarning) for one minor version, is listed in docs/EMBEDDING.md, then is removed.
_DEPRECATED: dict[str, tuple[str, str]] = {}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's own version (pyproject's)
        from importlib.metadata import version

        return version("vak-context")
    if name in _DEPRECATED:
        import warnings

        where, instead = _DEPRECATED[name]
        warnings.warn(f"vak_context.{name} is deprecated; use {instead}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), name)
    if name not in _PUBLIC:
        raise AttributeError(f"module 'vak_context' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
