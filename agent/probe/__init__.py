"""The capacity probe's I/O: synthetic turn-shaped histories, sent through a provider adapter.

``ProbeRunner(provider, key).run()`` does the three rungs of spec §1 and returns a ``ProbeReport``:

1. metadata: ``provider.model_context()`` (declared window, output limit);
2. cache: two identical requests behind a fresh prefix (reported cached tokens, or ≥5× faster);
3. horizon: the search of ``vak_context.context.capacity.ladder.LadderSearch``. Each size gets a synthetic history shaped
   like real turns (a user question, an assistant tool call, a digest-shaped result carrying an
   ``[evidence:…]`` tag, a short answer), ending in ONE instruction: call ``probe_ack`` with a
   nonce. The same history ending in "do not call a tool" is the negative control. A rung first
   sends its prompt with max_tokens=1 to see its billed size and re-aims until it lands on the
   target; each sample is then one request with ``max_tokens`` ≈ 32, sending the same bytes, so
   they hit the prefix cache and cost decode time only. A reply cut inside a call is continued.

Histories are sized in tokens through the tokens-per-char ratio the provider's own usage reports,
re-measured after every request, and filled to the character (the last answer is padded). Two protocols: ``native`` sends the tools in the request and reads
``tool_calls`` (an inline fence in the text also counts, and the profile records which one the model
used); ``inline_fence`` lists the tools in the system prompt and asks for a fenced call in the text,
for models whose template has no tool support.

``ProbeReport.ledger_payloads()`` is what every probe writes: an ``activity`` entry
(``capacity.probe``: rungs, samples, verdicts) and then the ``capacity_profile`` entry.

Where the pieces are (this module re-exports the public names):

* ``vak_context.agent.probe.history``: the synthetic turns and ``build_request``;
* ``vak_context.agent.probe.settings``: ``ProbeSettings``, what a run is asked;
* ``vak_context.agent.probe.results``: ``ProbeReport``, what it returns;
* ``vak_context.agent.probe.runner``: ``ProbeRunner``;
* ``vak_context.agent.probe.local``: ``probe_local`` and ``measure_local_profile`` for the bundled local models
  (their protocol and profile key are the catalogue's: ``vak_context.providers.local.catalogue``).
"""

from __future__ import annotations

from vak_context.agent.probe.history import (
    ACK_SPEC,
    SYSTEM,
    SyntheticTurn,
    build_request,
    instruction_text,
    synthetic_turn,
)
from vak_context.agent.probe.local import QUICK, measure_local_profile, probe_local
from vak_context.agent.probe.results import ProbeReport
from vak_context.agent.probe.runner import MIN_PREFILL_SAMPLE_TOKENS, SIZING_SHOTS, ProbeRunner, Progress
from vak_context.agent.probe.settings import ProbeSettings

__all__ = [
    "ACK_SPEC", "MIN_PREFILL_SAMPLE_TOKENS", "QUICK", "SIZING_SHOTS",
    "SYSTEM", "ProbeReport", "ProbeRunner", "ProbeSettings", "Progress", "SyntheticTurn", "build_request",
    "instruction_text", "measure_local_profile", "probe_local", "synthetic_turn",
]
