"""A closed turn's record is what its last step sent (spec P5): the directive keeps the tail it was sent
with (a ``turn_tail`` entry), and a result no longer than ``VERBATIM_CHARS`` stays as the request carried
it. So the next turn's first request starts with the previous turn's last request, byte for byte, and
the provider's prefix cache holds the whole previous turn. Longer results still become digests."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.scripted import PROFILE, Scripted, completion, fixed, payloads_of, tool_surface
from tests.fakes.sessions import Chain, add_result
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.workspace import Workspace
from vak_context.context.evidence.digest import evidence_tag
from vak_context.context.history.render import SHORT_ID, VERBATIM_CHARS, evidence_info, render_turn
from vak_context.context.history.turns import TurnIndex
from vak_context.context.request.assemble import system_prompt
from vak_context.events.blocks import TextBlock, ToolResultBlock
from vak_context.events.payloads import AssistantStep, Directive, EvidenceBody, ToolUseBlock, TurnTail
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


def _loop(store: LedgerStore, script: Scripted, workspace: Workspace) -> TurnLoop:
    """The scripted loop with a clock that moves, so every turn's tail differs from the last one's."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(script.handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    surface = tool_surface()
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=6, max_tokens=128)
    ticks = itertools.count()
    return TurnLoop(InProcessServices(store, "s1"), provider, PROFILE, config, workspace=workspace,
                    clock=lambda: 1_764_504_000.0 + 3_600 * next(ticks))


def _workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "mid.txt").write_text("m" * 1_200 + "\n")
    (root / "big.log").write_text("".join(f"line {i} " + "x" * 120 + "\n" for i in range(400)))
    return Workspace(root)


def _two_turns(tmp_path: Path, first_reads: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Turn 1 reads ``first_reads`` one per step and answers; turn 2 answers at once. Returns the request
    bodies the server got and the tails the ledger recorded."""
    replies = [fixed(completion(calls=[("read_file", {"path": p})])) for p in first_reads]
    replies += [fixed(completion("Done.")), fixed(completion("Nothing else."))]
    script = Scripted(replies)

    async def run() -> list[str]:
        with LedgerStore(tmp_path / "ledger") as store:
            loop = _loop(store, script, _workspace(tmp_path))
            await loop.run("Read the files.")
            await loop.run("Anything else?")
            return [t.text for t in payloads_of(store, "turn_tail")]

    return script.bodies, asyncio.run(run())


def test_the_next_turn_starts_with_the_previous_turns_last_request_byte_for_byte(tmp_path: Path) -> None:
    """Turn 1 reads two short files over two steps; turn 2's first request carries turn 1's last request's
    messages unchanged (its tail, its results as sent) and only appends turn 1's answer and turn 2's
    directive, which starts with turn 2's own, different tail."""
    bodies, tails = _two_turns(tmp_path, ["notes.txt", "mid.txt"])
    assert len(bodies) == 4 and len(tails) == 2 and tails[0] != tails[1]
    last_of_turn_1, first_of_turn_2 = bodies[2]["messages"], bodies[3]["messages"]
    assert first_of_turn_2[: len(last_of_turn_1)] == last_of_turn_1
    assert [m["role"] for m in first_of_turn_2[len(last_of_turn_1):]] == ["assistant", "user"]
    assert last_of_turn_1[1]["content"][0]["text"] == tails[0]  # message 0 is the system prompt
    assert [p["text"] for p in first_of_turn_2[-1]["content"]] == [tails[1], "Anything else?"]
    assert "m" * 1_200 in str(first_of_turn_2)  # the 1,201-char result, as sent


def test_a_result_longer_than_a_digest_still_becomes_its_digest_when_the_turn_closes(tmp_path: Path) -> None:
    """big.log (about 52k chars) is windowed in its turn and digested once the turn closes: the cache
    holds turn 1 up to that result, and the digest names the evidence for recall."""
    bodies, _ = _two_turns(tmp_path, ["notes.txt", "big.log"])
    last_of_turn_1, first_of_turn_2 = bodies[2]["messages"], bodies[3]["messages"]
    same = next(i for i, (a, b) in enumerate(zip(last_of_turn_1, first_of_turn_2, strict=False)) if a != b)
    assert same == len(last_of_turn_1) - 1  # everything before big.log's result is unchanged
    assert "call recall to expand]" in str(first_of_turn_2[same]["content"])


@settings(max_examples=40, deadline=None)
@given(size=st.sampled_from([0, 1, VERBATIM_CHARS - 1, VERBATIM_CHARS, VERBATIM_CHARS + 1, 3 * VERBATIM_CHARS]),
       char=st.sampled_from(["a", "é", "\n", "{"]))
def test_results_up_to_verbatim_chars_stay_as_sent_and_longer_ones_are_digests(size: int, char: str) -> None:
    """Around the limit, by characters (not bytes): at most ``VERBATIM_CHARS`` is the result as sent; one
    more is the digest ending with the tag that names its evidence and its length."""
    body = char * size
    c = Chain()
    c.add(Directive(text="Read it."))
    c.add(AssistantStep(blocks=(ToolUseBlock(id="a", name="read_file", input={"path": "x"}),)))
    ev, _ = add_result(c, "a", body, name="read_file")
    c.add(AssistantStep(blocks=(TextBlock(text="Read."),)))
    turn = TurnIndex.build(c.entries).turn(1)
    meta = EvidenceBody(tool_use_id="a", tool_name="read_file", chars=len(body), bytes=len(body.encode()))
    record = render_turn(turn, {ev: evidence_info(ev, meta, body.encode(), {"path": "x"})})
    shown = next(p for m in record for p in m.content if isinstance(p, ToolResultBlock)).content
    if size <= VERBATIM_CHARS:
        assert shown == body
    else:
        assert shown != body and shown.endswith(evidence_tag(ev[:SHORT_ID], size))


def test_the_recorded_tail_leads_the_closed_directive_and_a_misplaced_one_is_a_problem() -> None:
    """A ``turn_tail`` before the first step is the directive message's first part in the record (and is
    left out with ``with_tail=False``); one after a step is noted as a problem and not rendered."""
    c = Chain()
    c.add(Directive(text="First."))
    c.add(TurnTail(text="<turn_context>UTC 2026-12-01T00:00:00Z</turn_context>\n"))
    c.add(AssistantStep(blocks=(TextBlock(text="One."),)))
    c.add(Directive(text="Second."))
    c.add(AssistantStep(blocks=(TextBlock(text="Two."),)))
    late = c.add(TurnTail(text="<turn_context>late</turn_context>\n"))
    index = TurnIndex.build(c.entries)
    first = render_turn(index.turn(1), {})[0].content
    assert [p.text for p in first if isinstance(p, TextBlock)] == [
        "<turn_context>UTC 2026-12-01T00:00:00Z</turn_context>\n", "First."]
    assert [p.text for p in render_turn(index.turn(1), {}, with_tail=False)[0].content
            if isinstance(p, TextBlock)] == ["First."]
    assert index.turn(2).tail == "" and render_turn(index.turn(2), {})[0].text == "Second."
    assert any(late in problem for problem in index.problems)
    assert index.dump()["turns"][0]["tail"].startswith("<turn_context>UTC")
