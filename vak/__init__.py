"""vak-context: a context engine for LLM agents (cross-cutting pieces: errors, names, config)."""

__version__ = "0.1.0"
