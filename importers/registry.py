"""The formats ``vak import`` reads, by name, and detection: each format's ``sniff`` asked in order.

One module per format (``importers/<format>.py``), each with ``sniff(doc)`` and ``parse(doc)``
and its ``FORMAT``. Adding a format: write its module, then put its ``FORMAT`` in ``ORDER`` before
any format more general than it (``openai-chat`` stays last: any list of chat messages is one).
"""

from __future__ import annotations

import vak_context.importers.claude_code as claude_code
import vak_context.importers.mini_swe_agent as mini_swe_agent
import vak_context.importers.openai_chat as openai_chat
import vak_context.importers.openhands as openhands
import vak_context.importers.swe_agent as swe_agent
import vak_context.importers.tau_bench as tau_bench
from vak_context.importers.base import Document, ImportFormat

# Asked in this order; the first format whose sniff claims a file reads it. A file's records are
# JSON Lines or one JSON document, and each sniff claims only its own kind, so only formats of one
# kind compete; among those the more specific ones come first.
ORDER: tuple[ImportFormat, ...] = (
    claude_code.FORMAT,  # JSON Lines: sessionId or user/assistant records
    openhands.FORMAT,  # JSON Lines: history and instance_id
    tau_bench.FORMAT,  # a JSON array of items with a traj
    mini_swe_agent.FORMAT,  # a JSON object naming its mini-swe-agent trajectory format
    swe_agent.FORMAT,  # a JSON object with history and trajectory arrays
    openai_chat.FORMAT,  # chat messages, in any of five layouts
)
REGISTRY: dict[str, ImportFormat] = {f.name: f for f in ORDER}
FORMATS: tuple[str, ...] = tuple(REGISTRY)


def detect(doc: Document) -> ImportFormat | None:
    """The first format in ``ORDER`` whose sniff claims ``doc``; None when none does."""
    return next((f for f in ORDER if f.sniff(doc)), None)
