"""A turn's ``plan`` entry holds what changed since the model's plan entry before it (ledger format 2,
``vak_context.context.planner.delta``), so it does not grow with the session; the plan still decodes exactly
(its digest) after a restart, by a reader holding none of the plans, and format-1 entries (the rows as JSON
turns) read as before."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import httpx

import vak_context
from tests.fakes.embedder import ScriptedModel, make_tools
from tests.fakes.sessions import SessionBuilder
from vak_context.actors.assembler import AssemblerActor
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.planner.delta import (
    CHARS_FORM,
    KEYFRAME_EVERY,
    ROWS_FORM,
    TOKENS_FORM,
    VECTOR_CODES,
    PlanRows,
    _edits,
    _str_edits,
    rows_of_record,
    rows_record,
)
from vak_context.context.planner.policy import plan_entry, plan_of_entry, rows_reader
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import AssistantStep, Directive, PlanRecord, TextBlock
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.ledger_format import FORMATS

MODEL = "openai-compat:scripted"


async def _turns(folder: Path, turns: range) -> None:
    model = ScriptedModel()
    tools, _ = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("s", model=MODEL, base_url="http://127.0.0.1:9/v1", http_client=client,
                                      tools=tools, window=32_000) as session:
                for turn in turns:
                    result = await session.run(f"please search query-{turn:03d}")
                    assert result.outcome == "completed"


def _plans(folder: Path) -> list[tuple[str, PlanRecord, int]]:
    mapper = Mapper()
    with LedgerStore(folder, readonly=True) as store:
        return [(e.id, mapper.payload_of(e), len(e.payload)) for e in store.entries("s") if e.kind == "plan"]


async def test_each_plan_entry_is_a_delta_against_the_one_before_and_decodes_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "ledger"
    await _turns(folder, range(1, 7))
    plans = _plans(folder)
    assert len(plans) == 6
    _, first, _ = plans[0]
    assert first.base is None and first.rows is not None and first.plan["turns"] is None  # whole: nothing before
    for (before, _, _), (_, record, _) in itertools.pairwise(plans):
        assert record.base == before and record.rows is not None and record.plan["turns"] is None
        assert record.rows["keep"] > 0 and len(record.rows["ids"]) <= 2  # the new turn (and the one it closed)
    sizes = [size for _, _, size in plans[1:]]
    assert max(sizes) - min(sizes) < 600  # the entry does not grow with the turns before it

    # A reader holding none of the plans (a restart) reads the chain back to the whole one: every plan exact.
    mapper = Mapper()
    with LedgerStore(folder, readonly=True) as store:
        read = rows_reader(lambda entry_id: mapper.payload_of(store.get(entry_id)))
        for entry_id, record, _ in plans:
            rows = PlanRows().rows_of(entry_id, read)
            p = plan_of_entry(record, rows)
            assert p is not None and p.digest == record.digest
        assert plan_of_entry(plans[-1][1]) is None  # a delta without its base's rows says nothing

        # The assembler a restart builds decodes the session's last plan from the ledger, as its state.
        state = AssemblerActor(str(folder), store).state("s", plans[-1][1].model)
        assert state.frozen is not None and state.frozen.plan.digest == plans[-1][1].digest

    # After a restart the writer's first plan entry is whole, or a delta against the last one before the
    # restart when the writer read that one back (the assembler does, for its state); the next is a delta.
    await _turns(folder, range(7, 9))
    later = _plans(folder)[6:]
    assert later[0][1].base in (None, plans[-1][0]) and later[1][1].base == later[0][0]
    with LedgerStore(folder, readonly=True) as store:
        read = rows_reader(lambda entry_id: mapper.payload_of(store.get(entry_id)))
        for entry_id, record, _ in later:
            p = plan_of_entry(record, PlanRows().rows_of(entry_id, read))
            assert p is not None and p.digest == record.digest


PROFILE = CapacityProfile(ProfileKey("local", "m"), 8_192, Horizon(6_000, 0.9, 0.0), Ewma(0.25, 3), 512)


def _view_plans(turns: int, moving_rate: bool = False) -> list[tuple[str, PlanRecord]]:
    """One plan a turn of a growing session, each written against the one before (``moving_rate``: at a
    tokens-per-char rate each turn's receipts moved, as a live session's does)."""
    b = SessionBuilder("s")
    out: list[tuple[str, PlanRecord]] = []
    rows = PlanRows()
    last: str | None = None
    for i in range(turns):
        b.turn(f"Read module {i} and say what it does.", [("read_file", {"path": f"m{i}.py"}, f"code of m{i}", False)])
        b.add(Directive(text=f"Now compare module {i} with the others."))
        b.add(AssistantStep(blocks=(TextBlock(text="thinking it over"),)))
        profile = PROFILE if not moving_rate else dataclasses.replace(PROFILE, tokens_per_char=Ewma(0.25 + (i % 5) / 50, 3))
        p = b.view.plan(profile, "", prefix_tokens=100, tail_tokens=10, current=len(b.view.index.turns))
        record = plan_entry(p, b.view.index.head, rows.base_for(last))
        last = f"{i:064x}"
        rows.wrote(last, p.rows, record.base)
        out.append((last, record))
    return out


def test_a_whole_entry_every_keyframe_bounds_how_far_back_a_restart_reads() -> None:
    plans = _view_plans(KEYFRAME_EVERY + 3)
    whole = [i for i, (_, r) in enumerate(plans) if r.base is None]
    assert whole == [0, KEYFRAME_EVERY]
    records = dict(plans)
    reads: list[str] = []

    def read(entry_id: str) -> tuple[str | None, dict[str, object]] | None:
        reads.append(entry_id)
        r = records[entry_id]
        return (r.base, dict(r.rows or {}))

    last_id, last = plans[-1]
    p = plan_of_entry(last, PlanRows().rows_of(last_id, read))
    assert p is not None and p.digest == last.digest and len(reads) == 3  # two deltas and the whole one


def test_rows_written_against_a_base_that_does_not_fit_are_refused() -> None:
    plans = _view_plans(3)
    first, second = plans[0][1], plans[1][1]
    assert first.rows is not None and second.rows is not None
    whole = rows_of_record(first.rows, None)
    assert rows_of_record(rows_record(whole, None), None) == whole
    try:
        rows_of_record(second.rows, None)  # keeps ids of a base it was not given
    except ValueError as exc:
        assert "keep" in str(exc)
    else:
        raise AssertionError("a delta read without its base was accepted")


def test_a_format_1_plan_entry_reads_with_its_rows_as_json_turns() -> None:
    """What code before format 2 wrote: schema version 1, the rows as the plan's JSON turns."""
    b = SessionBuilder("s")
    b.turn("Read module a.", [("read_file", {"path": "a.py"}, "code", False)])
    b.add(Directive(text="And now?"))
    p = b.view.plan(PROFILE, "", prefix_tokens=100, tail_tokens=10, current=len(b.view.index.turns))
    v1 = plan_entry(p, b.view.index.head).model_dump(mode="json", exclude={"base", "rows"})
    v1["plan"] = p.to_json()
    mapper = Mapper()
    entry = dataclasses.replace(mapper.entry(v1, session="s", seq=0, parent=None, time_us=0), v=1)
    record = mapper.payload_of(entry)
    assert isinstance(record, PlanRecord) and record.rows is None and record.base is None
    assert plan_of_entry(record) == p
    assert PlanRows().rows_of(entry.id, rows_reader(lambda _: record)) == p.rows
    assert "plan" in FORMATS[2]  # the delta is part of format 2, documented with it


def test_the_sizes_are_recorded_as_characters_so_a_moving_rate_does_not_grow_the_entry() -> None:
    """Each receipt measures the tokens-per-char rate anew, which moves the tokens of a share of every turn:
    as token edits the entry grew with the session. As characters (a closed turn's never change) and the
    rate, its sizes at 240 turns are the size of those at 40, and every plan still decodes exactly. (The
    scored turns' relevance, which each new turn moves for every turn sharing a term with the directive, is
    no longer recorded: ``test_the_relevance_is_not_recorded_so_the_entry_does_not_grow_with_the_scored_turns``.)"""
    plans = _view_plans(240, moving_rate=True)
    records = dict(plans)
    assert all(r.rows is not None and r.rows["form"] == ROWS_FORM for r in records.values())

    def read(entry_id: str) -> tuple[str | None, dict[str, object]] | None:
        r = records[entry_id]
        return (r.base, dict(r.rows or {}))

    held, decoded = PlanRows(), []  # a reader after a restart, decoding the chain from the whole entry on
    for entry_id, record in plans:
        rows = held.rows_of(entry_id, read)
        p = plan_of_entry(record, rows)
        assert p is not None and p.digest == record.digest
        assert rows is not None and rows.rate == record.inputs["profile"]["tokens_per_char"]["value"]
        decoded.append(rows)

    def size(rows: dict[str, object], keys: tuple[str, ...] = ()) -> int:
        kept = {k: v for k, v in rows.items() if k != "relevance" and (not keys or k in keys)}
        return len(json.dumps(kept, separators=(",", ":")))

    sizes = ("rate", "full_chars", "card_chars")
    early, late = [r.rows or {} for _, r in plans[30:40]], [r.rows or {} for _, r in plans[230:240]]
    assert max(size(r, sizes) for r in late) <= max(size(r, sizes) for r in early) + 16
    # the rest is what changed since the turn before (the new turn, fidelities that moved), not the session
    assert max(map(size, late)) <= 2 * max(map(size, early))
    bare = [dataclasses.replace(r, full_chars=None) for r in decoded[-2:]]
    as_tokens = rows_record(bare[1], bare[0])  # the same delta as token edits (form 1)
    assert as_tokens["form"] == TOKENS_FORM and size(as_tokens, ("full", "card")) > 10 * size(late[-1], sizes)


def test_rows_without_characters_are_written_and_read_as_token_edits() -> None:
    """Rows a table did not lend carry no characters (and entries of form 1 were written so): their sizes
    are token edits, read as before, and a delta against such a base falls back to them too."""
    plans = _view_plans(3, moving_rate=True)
    first, second = (rows_of_record(plans[0][1].rows or {}, None),
                     rows_of_record(plans[1][1].rows or {}, rows_of_record(plans[0][1].rows or {}, None)))
    bare = [dataclasses.replace(r, full_chars=None, card_chars=None, rate=None) for r in (first, second)]
    whole = rows_record(bare[0], None)
    assert whole["form"] == TOKENS_FORM and "full" in whole and "rate" not in whole
    assert rows_of_record(whole, None) == first
    delta = rows_record(second, bare[0])  # a base without characters: token edits
    assert delta["form"] == TOKENS_FORM and rows_of_record(delta, bare[0]) == second
    assert rows_record(second, first)["form"] == ROWS_FORM
    # tokens that are not the characters at the rate are never recorded as characters
    off = dataclasses.replace(second, full=(*second.full[:-1], second.full[-1] + 1))
    assert rows_record(off, first)["form"] == TOKENS_FORM


def test_the_relevance_is_not_recorded_so_the_entry_does_not_grow_with_the_scored_turns() -> None:
    """Each new turn moves the normalised BM25 score of every turn that shares a term with the directive (here
    every other one), so recorded where changed the relevance grew with the session. It is an input, like the
    sizes, recorded as its digest (``inputs["relevance"]``, which ``explain()`` checks by planning again): the
    rows record (form 3) leaves it out, and the whole rows record at 240 turns is the size of one at 40. A plan
    read back has the same digest, rows and request; its rows' relevance is None (not recorded)."""
    plans = _view_plans(240)
    records = dict(plans)
    assert all(r.rows is not None and r.rows["form"] == ROWS_FORM and "relevance" not in r.rows for _, r in plans)
    assert all(isinstance(r.inputs["relevance"], str) for _, r in plans)

    def size(rows: dict[str, object] | None) -> int:
        return len(json.dumps(rows, separators=(",", ":")))

    early, late = [size(r.rows) for _, r in plans[30:40]], [size(r.rows) for _, r in plans[230:240]]
    # what changed since the turn before (the new turn, the fidelities and retrieved turns that moved), not the
    # session: at 1,000 turns of the embedding bench the relevance alone was ~3 KB an entry
    assert max(late) <= 2 * max(early) < 1_000

    def read(entry_id: str) -> tuple[str | None, dict[str, object]] | None:
        r = records[entry_id]
        return (r.base, dict(r.rows or {}))

    entry_id, record = plans[-1]
    rows = PlanRows().rows_of(entry_id, read)
    p = plan_of_entry(record, rows)
    assert p is not None and p.digest == record.digest and rows is not None and rows.relevance is None
    assert all(t.relevance == 0.0 for t in p.turns)  # not recorded: the turns read none
    b = SessionBuilder("s")  # the same session planned now: equal rows (the relevance aside: None is unknown)
    for i in range(240):
        b.turn(f"Read module {i} and say what it does.", [("read_file", {"path": f"m{i}.py"}, f"code of m{i}", False)])
        b.add(Directive(text=f"Now compare module {i} with the others."))
        b.add(AssistantStep(blocks=(TextBlock(text="thinking it over"),)))
    fresh = b.view.plan(PROFILE, "", prefix_tokens=100, tail_tokens=10, current=len(b.view.index.turns))
    assert fresh.digest == record.digest and fresh.rows == rows and fresh.rows.relevance


FORM_2 = Path(__file__).parent / "data" / "plan-rows-form-2.json"


def test_plan_entries_of_form_2_written_before_still_read_with_their_relevance() -> None:
    """``data/plan-rows-form-2.json``: the plan entries ``_view_plans(6, moving_rate=True)`` made at commit
    14123b5, the code before form 3 (rows of characters and the relevance's edits), as
    ``PlanRecord.model_dump(mode="json")`` with their ids. This code reads each back, by a reader holding none of
    them, to the plan it recorded (its digest, which the same session planned by this code has too), relevance
    and all; and a form-3 entry written against the last of them reads back too."""
    raw = json.loads(FORM_2.read_text())
    old = [(x["id"], PlanRecord.model_validate(x["record"])) for x in raw]
    assert all(r.rows is not None and r.rows["form"] == CHARS_FORM for _, r in old)
    records = dict(old)

    def read(entry_id: str) -> tuple[str | None, dict[str, object]] | None:
        r = records[entry_id]
        return (r.base, dict(r.rows or {}))

    now = _view_plans(6, moving_rate=True)  # the same plans, made by this code
    held = PlanRows()
    for (entry_id, record), (_, made) in zip(old, now, strict=True):
        rows = PlanRows().rows_of(entry_id, read)
        assert rows is not None and rows.relevance is not None and held.rows_of(entry_id, read) == rows
        p = plan_of_entry(record, rows)
        assert p is not None and p.digest == record.digest == made.digest
        recorded = {i: v for i, v in (record.rows or {})["relevance"]}  # type: ignore[union-attr]
        assert recorded and all(rows.relevance[i] == v for i, v in recorded.items())  # read back as recorded
    last_id = old[-1][0]
    b = SessionBuilder("s")
    for i in range(7):
        b.turn(f"Read module {i} and say what it does.", [("read_file", {"path": f"m{i}.py"}, f"code of m{i}", False)])
        b.add(Directive(text=f"Now compare module {i} with the others."))
        b.add(AssistantStep(blocks=(TextBlock(text="thinking it over"),)))
    p7 = b.view.plan(PROFILE, "", prefix_tokens=100, tail_tokens=10, current=len(b.view.index.turns))
    base = held.base_for(last_id)
    assert base is not None
    record = plan_entry(p7, b.view.index.head, base)
    assert record.base == last_id and record.rows is not None and record.rows["form"] == ROWS_FORM
    records[f"{7:064x}"] = record
    back = plan_of_entry(record, PlanRows().rows_of(f"{7:064x}", read))
    assert back is not None and back.digest == p7.digest and back.rows == p7.rows


def test_the_codes_edits_found_as_a_vector_comparison_are_the_runs_found_code_by_code() -> None:
    """``_str_edits`` compares long code strings as bytes in numpy: the same runs as the step-by-step ``_edits``,
    for changed codes anywhere, a shorter or longer plan, and none changed."""
    rng = random.Random(37)
    for _ in range(200):
        n = rng.randint(VECTOR_CODES, 3 * VECTOR_CODES)
        base = "".join(rng.choice("pcFx") for _ in range(n))
        new = list(base[: n + rng.randint(-20, 20)])
        for _ in range(rng.choice((0, 1, 3, 30))):
            if new:
                new[rng.randrange(len(new))] = rng.choice("pcF*")
        new += ["c"] * max(0, n + rng.randint(-5, 5) - len(new))
        code = "".join(new)
        assert _str_edits(base, code) == [[i, "".join(vs)] for i, vs in _edits(base, code)]
