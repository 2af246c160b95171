"""The caller's loop through public names only (``import vak_context``), once per wire format: the embedder
takes each request rendered for the bound model's format, "sends" it to a scripted model answering with
the provider's documented bodies (tests/fakes/wire_models.py), hands back the reply and the results of its
own two tools (a search with 20 JSON results of about 10k characters, a command with 66 lines and an exit
code). The engine's own side calls (packet summaries, counts) go through the session's ``http_client``.

In each run (tests/fakes/done_when.py: the directives, the driver and the checks, shared with the run on
Ray): 27 turns; the model calls ``find_tools`` and ``recall`` once each and meets one documented
over-length 400, re-planned once; packets appear once the small window needs them (no summariser wired);
turn 26 recalls turn 1's search result byte for byte; a tool that raised and a result marked ``is_error``
reach the model as errors; the caller's code raising at turn 25 leaves a failed turn with a card, and turn
27 works."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.done_when import callers_loop, check_callers_loop
from tests.fakes.embedder import make_tools
from tests.fakes.wire_models import FORMATS, WireModel

SPECS = {"openai": "openai:gpt-4o-mini", "openai-responses": "openai-responses:gpt-4o-mini",
         "anthropic": "anthropic:claude-sonnet-4-5", "gemini": "gemini:gemini-2.5-flash"}
# The window override each run plans against (the fake counts and bills the whole prompt: system, tools
# and conversation): small enough that older turns go to packets, with room for a summary, well before
# turn 26. Gemini's rendering of the same turns is larger, but with cards at their bounded levels (issue 26)
# 10,500 no longer needed a packet by then, so every format plans against 9,500.
WINDOWS = {"openai": 9_500, "openai-responses": 9_500, "anthropic": 9_500, "gemini": 9_500}
KEY = "sk-test-callers-loop-0123456789abcdef"


@pytest.mark.parametrize("wire", sorted(SPECS))
async def test_27_turns_of_the_callers_loop(tmp_path: Path, wire: str) -> None:
    model = WireModel(FORMATS[wire])
    functions, ran = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("agent-1", model=SPECS[wire], api_key=KEY, http_client=client,
                                      tools=functions, window=WINDOWS[wire]) as session:
                run = await callers_loop(session, model, functions)
                assert session.cards() == run.cards  # the sync form reads the same cards
    check_callers_loop(run, model, ran, wire=wire, key=KEY)
