"""The one chars-to-tokens estimate: characters times the bound model's measured tokens per char.

Every size the engine plans with before a server counts it exactly goes through ``estimate_tokens``.
It rounds up by default, so an estimate never undercounts a budget by a fraction of a token; a caller
that has always rounded otherwise (a simulation's floor) passes its ``rounding`` so its figures stay
the same integers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# Before any usage is seen: about four characters per token, the usual figure for English text
# on BPE tokenizers. It is a prior (samples=0), replaced outright by the first measurement.
PRIOR_TOKENS_PER_CHAR = 0.25


def estimate_tokens(chars: int, tokens_per_char: float, *, rounding: Callable[[float], int] = math.ceil) -> int:
    """``rounding(chars × tokens_per_char)``: ``math.ceil`` unless the caller says otherwise."""
    return rounding(chars * tokens_per_char)
