"""Expand a window of a tool result: answer every recall call it shows, exactly as the recall tool would."""

from __future__ import annotations

import json
import re

from vak_context.context.evidence.digest import RecallRequest, parse_recall_args, select

# an omission line (replaced whole, its newline included) or a clipped line's note (replaced, the
# line's own terminator stays): each names the recall call that returns what it stands for
_MARKER = re.compile(
    r"\[… lines? \d+(?:-\d+)? omitted \(\d+ chars\); recall\((?P<omitted>\{[^\n]*?\})\) returns them …\]\n"
    r"| … \[line \d+ continues for \d+ more chars; recall\((?P<continued>\{[^\n]*?\})\) returns them\]"
)


def expand(shown: str, body: str, evidence_id: str) -> tuple[str, int]:
    """``shown`` with every omission line and clipped-line note replaced by what its recall call
    returns: the call is parsed and answered exactly as the recall tool would. Returns the expanded
    text and how many calls it made."""
    out, pos, calls = [], 0, 0
    for m in _MARKER.finditer(shown):
        args = json.loads(m.group("omitted") or m.group("continued"))
        request = parse_recall_args(args)
        assert isinstance(request, RecallRequest) and request.id == evidence_id, args
        recalled = select(body, evidence_id, request.range, request.chars)
        assert isinstance(recalled, str), recalled
        out += [shown[pos : m.start()], recalled]
        pos, calls = m.end(), calls + 1
    out.append(shown[pos:])
    return "".join(out), calls
