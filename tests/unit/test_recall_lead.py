"""A recall whose result does not fit the current turn's room (issue 36 item 3): it shows the leading whole lines
it asked for and names the rest with the exact recall call; following that call shows the next lines, never the
digest the model recalled from nor the same text twice. Pure: a chain of entries, the current turn's planner
(``context/planner/currentturn.py``) under a room of 1,500 tokens, and the rendering the request carries."""

from __future__ import annotations

import json
import re

from tests.fakes.sessions import Chain
from vak_context.context.evidence.digest import DIGEST_CHARS, select
from vak_context.context.evidence.lead import recall_lead
from vak_context.context.history.render import EvidenceInfo, api_problems, evidence_info, render_turn
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.currentturn import fit, turn_costs
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import AssistantStep, Directive, EvidenceBody, ToolResult

TPC = 0.25
ROOM = 1_500
REST = re.compile(r"^\[lines (\d+)-(\d+) of (\S+) shown; recall\((\{.*\})\) returns the rest\]$")
# A README of about 4,000 tokens, numbered as read_file numbers it: line 14 says how to run the tests.
LINES = [f"{n:>4}\t{'make test     # lint and every test' if n == 14 else f'line {n} of the readme, ' + 'x' * 80}\n"
         for n in range(1, 161)]
BODY = "".join(LINES)


class Turn:
    """One open turn, built step by step: each step one call and its stored result."""

    def __init__(self) -> None:
        self.chain = Chain()
        self.chain.add(Directive(text="Which command runs the tests?"))
        self.metas: dict[str, tuple[EvidenceBody, bytes, dict]] = {}
        self.calls = 0

    def step(self, name: str, arguments: dict, body: str) -> str:
        self.calls += 1
        call = f"c{self.calls}"
        self.chain.add(AssistantStep(blocks=(ToolUseBlock(id=call, name=name, input=arguments),)))
        meta = EvidenceBody(tool_use_id=call, tool_name=name, chars=len(body), bytes=len(body.encode()))
        ev = self.chain.add(meta, body.encode())
        self.chain.add(ToolResult(tool_use_id=call, tool_name=name, content=body, evidence_id=ev))
        self.metas[ev] = (meta, body.encode(), arguments)
        return ev

    def request(self) -> list[str]:
        """Each result as the current turn's request carries it under ``ROOM`` tokens."""
        index = TurnIndex.build(self.chain.entries, TPC)
        turn = index.turns[-1]
        infos: dict[str, EvidenceInfo] = {ev: evidence_info(ev, m, blob, args) for ev, (m, blob, args) in self.metas.items()}
        plan = fit(turn_costs(index, turn, infos), TPC, ROOM)
        assert plan.tokens <= ROOM
        messages = render_turn(turn, infos, first_step=plan.packet_through, digest_until=plan.digest_through,
                               with_tail=False)
        assert api_problems(messages) == []
        return [p.content for m in messages for p in m.content if isinstance(p, ToolResultBlock)]


def test_a_recall_over_the_room_shows_leading_lines_and_the_call_for_the_rest_and_following_it_reads_on() -> None:
    assert len(BODY) * TPC > 3_500  # the body alone is more than twice the room
    turn = Turn()
    read = turn.step("read_file", {"path": "README.md"}, BODY)[:12]
    turn.step("recall", {"id": read}, BODY)
    shown = turn.request()[-1]
    assert "[evidence:" not in shown  # not the digest the model recalled from
    *lines, rest = shown.splitlines(keepends=True)
    assert "".join(lines) == "".join(LINES[:len(lines)])  # whole leading lines, from line 1
    assert 10 < len(lines) < len(LINES) and len(shown) <= DIGEST_CHARS
    m = REST.match(rest)
    assert m is not None, rest
    assert (int(m.group(1)), int(m.group(2)), m.group(3)) == (1, len(lines), str(len(LINES)))
    follow = json.loads(m.group(4))
    assert follow == {"id": read, "range": [len(lines) + 1, len(LINES)]}  # the recall tool's own arguments

    # The model follows the call: the recall returns exactly those lines, and the request shows the next ones.
    sliced = select(BODY, read, tuple(follow["range"]))
    assert isinstance(sliced, str)
    turn.step("recall", follow, sliced)
    results = turn.request()
    after = results[-1]
    *next_lines, rest2 = after.splitlines(keepends=True)
    assert "".join(next_lines) == "".join(LINES[len(lines):len(lines) + len(next_lines)])
    assert not set(next_lines) & set(lines)  # never the same text twice
    m2 = REST.match(rest2)
    assert m2 is not None and json.loads(m2.group(4)) == {"id": read, "range": [len(lines) + len(next_lines) + 1,
                                                                                   len(LINES)]}
    assert m2.group(3) == f"{len(lines) + 1}-{len(LINES)}"


def test_a_lead_is_the_whole_text_when_it_fits_and_none_where_lines_are_not_what_was_asked() -> None:
    short = "".join(LINES[:3])
    assert recall_lead({"id": "abc"}, short, len(short), DIGEST_CHARS) == short
    assert recall_lead({"id": "abc", "chars": [1, 5]}, BODY, len(BODY), DIGEST_CHARS) is None
    assert recall_lead({"turn": 2}, BODY, len(BODY), DIGEST_CHARS) is None
    assert recall_lead({"id": "abc"}, BODY[:5000], len(BODY), DIGEST_CHARS) is None  # a window, not the body
    assert recall_lead({"id": "abc", "range": "3-40"}, BODY, len(BODY), DIGEST_CHARS) is not None
    one_long = "y" * 10_000 + "\n" + "z" * 3_000 + "\n"
    lead = recall_lead({"id": "abc"}, one_long, len(one_long), DIGEST_CHARS)
    assert lead is not None and len(lead) <= DIGEST_CHARS
    assert 'recall({"id": "abc", "range": [1, 1], "chars": [' in lead  # the clipped line names its own rest
    assert lead.endswith('recall({"id": "abc", "range": [2, 2]}) returns the rest]')


def test_a_one_line_result_over_the_limit_shows_as_much_of_its_line_as_fits_beside_the_note() -> None:
    """Issue 36 (BFCL long_context 82 at T = 4,096): a recalled one-line JSON body of 6,675 chars came back as its first
    756 chars (half the room), the rest of the limit unused. The lead shows the line's start up to the limit less the
    note, and the note's call returns exactly the characters after it."""
    line = '{"car_info": "' + "; ".join(f"Field{i}: value {i}" for i in range(400)) + '"}'
    assert len(line) > 4 * DIGEST_CHARS
    lead = recall_lead({"id": "abc"}, line, len(line), DIGEST_CHARS)
    assert lead is not None and DIGEST_CHARS - 200 < len(lead) <= DIGEST_CHARS
    note = re.search(r' … \[line 1 continues for (\d+) more chars; recall\((\{.*\})\) returns them\]\n$', lead)
    assert note is not None, lead[-200:]
    shown = lead[:note.start()]
    assert line.startswith(shown)
    follow = json.loads(note.group(2))
    assert follow == {"id": "abc", "range": [1, 1], "chars": [len(shown) + 1, len(line)]}
    rest = select(line, "abc", (1, 1), (len(shown) + 1, len(line)))
    assert shown + str(rest) == line and int(note.group(1)) == len(line) - len(shown)
