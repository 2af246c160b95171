"""The scripted upstream of :mod:`.scripted`, playing BFCL's single-turn answers (:mod:`.single`):
while a request is at most T tokens (the same stated count) it calls the answer's functions with the first
allowed value of each argument (:func:`~.single.truth_calls`); above T it degrades exactly as
:class:`~.scripted.DegradingModel` does (no call and a malformed call, alternately by the parity of the
request's assistant messages), and it answers the probe's ladder and the packet summaries the same way.

The question it answers is the entry whose question text occurs in the request's newest user message that
holds one (the direct request and the engine's projection alike); a request holding none gets a text reply.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from vak_context.farm.bfcl.scripted import DegradingModel, Step, _text
from vak_context.farm.bfcl.single import SingleEntry, truth_calls


class SingleTurnModel(DegradingModel):
    def __init__(self, entries: Iterable[SingleEntry], threshold: int | None, *, name: str = "degrading") -> None:
        super().__init__((), threshold, name=name)
        self.answers: dict[str, list[Step]] = {
            e.text: [Step(n, json.loads(a), frozenset(), 0) for n, a in truth_calls(e)] for e in entries}

    def _next(self, messages: list[Mapping[str, Any]]) -> list[Step]:
        for m in reversed(messages):
            if m.get("role") != "user":
                continue
            text = _text(m)
            found = [key for key in self.answers if key and key in text]
            if found:
                return self.answers[max(found, key=len)]
        return []
