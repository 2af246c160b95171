"""Tool exchanges a client writes as text (serve/textform.py): smolagents' ``Calling tools:`` reply and
``Observation:`` result are read as the reply with its call and the call's result, whose digests are the
ones the session holds for the reply it sent; a new task merged into the last observation is a user message
of its own; anything the rule does not name stays as written."""

from __future__ import annotations

from typing import Any

import pytest

from vak_context.serve.protocol import ClientCall, Item, read_anthropic, read_openai
from vak_context.serve.textform import as_text_exchanges, read_text_exchanges, with_text_exchanges

EXPORT = "\n".join(f"O-{1000 + i} | carrier=GLS | status=delivered" for i in range(300))


def smol_calls(*calls: tuple[str, str, Any]) -> str:
    """A reply as smolagents 1.26 writes it back: ``"Calling tools:\\n" + str([tc.dict() ...])``."""
    return "Calling tools:\n" + str([{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                     for i, n, a in calls])


def openai_body(*messages: tuple[str, str]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": "You are an agent."},
                                       *({"role": r, "content": [{"type": "text", "text": t}]} for r, t in messages)]}


def test_smolagents_reply_and_observation_are_the_call_and_its_result() -> None:
    request = with_text_exchanges(read_openai(openai_body(
        ("user", "New task:\nWhich carrier ships O-1234?"),
        ("assistant", smol_calls(("call_a", "export_orders", {"month": "March"}))),
        ("user", f"Observation:\n{EXPORT}"))))
    assert request.items == (
        Item("user", "New task:\nWhich carrier ships O-1234?"),
        Item("assistant", "", (ClientCall("call_a", "export_orders", {"month": "March"}),)),
        Item("tool", EXPORT, call_id="call_a"))
    # The reply's digest is the one of the reply the server sent (a reply with calls: its ids and names).
    sent = Item("assistant", "", (ClientCall("call_a", "export_orders", {"month": "March"}),))
    assert request.items[1].digest() == sent.digest()


def test_the_text_before_the_marker_is_the_replys_text_and_json_is_read_too() -> None:
    listed = '[{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\\"key\\": \\"k1\\"}"}}]'
    items = read_text_exchanges([Item("user", "Look k1 up."),
                                 Item("assistant", f"I will look it up.\nCalling tools:\n{listed}"),
                                 Item("user", "Observation:\nk1 = 42")])
    assert items[1:] == (Item("assistant", "I will look it up.", (ClientCall("c1", "lookup", {"key": "k1"}),)),
                         Item("tool", "k1 = 42", call_id="c1"))


def test_a_new_task_merged_into_the_last_observation_is_a_user_message_of_its_own() -> None:
    items = read_text_exchanges([
        Item("assistant", smol_calls(("f2", "final_answer", {"answer": "Snow, -3 C"}))),
        Item("user", "Observation:\nSnow, -3 C\nNew task:\nAnd in Bergen?")])
    assert items == (Item("assistant", "", (ClientCall("f2", "final_answer", {"answer": "Snow, -3 C"}),)),
                     Item("tool", "Snow, -3 C", call_id="f2"),
                     Item("user", "New task:\nAnd in Bergen?"))


def test_an_error_naming_the_call_is_its_error_result() -> None:
    error = "Error:\nTool 'lookup' failed: KeyError 'k9'\nNow let's retry: take care not to repeat previous errors!"
    items = read_text_exchanges([Item("assistant", smol_calls(("c9", "lookup", {"key": "k9"}))),
                                 Item("user", f"Call id: c9\n{error}")])
    assert items[1] == Item("tool", error, call_id="c9", is_error=True)


def test_the_anthropic_protocol_reads_the_same() -> None:
    body = {"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "New task:\nWhat is the weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "text", "text": smol_calls(("w1", "get_weather", {"city": "Oslo"}))}]},
        {"role": "user", "content": [{"type": "text", "text": "Observation:\nSnow, -3 C"}]}]}
    assert with_text_exchanges(read_anthropic(body)).items[1:] == (
        Item("assistant", "", (ClientCall("w1", "get_weather", {"city": "Oslo"}),)),
        Item("tool", "Snow, -3 C", call_id="w1"))


@pytest.mark.parametrize(("reply", "after"), [
    # Several calls: one observation holds every result, in no order a reader can split.
    (smol_calls(("a", "get_weather", {"city": "Oslo"}), ("b", "get_weather", {"city": "Rome"})),
     "Observation:\nSnow, -3 C\nSunny, 19 C"),
    # What follows is not a result: the client's own words, an error naming another call.
    (smol_calls(("a", "get_weather", {"city": "Oslo"})), "Never mind, what time is it?"),
    (smol_calls(("a", "get_weather", {"city": "Oslo"})), "Call id: z\nError:\nno such call"),
    # Not a calls list: prose naming the marker, a list that is not OpenAI's shape, code that is no literal.
    ("Calling tools: is what I do next.", "Observation:\nfine"),
    ("Calling tools:\n['get_weather']", "Observation:\nfine"),
    ("Calling tools:\n[{'id': 'a', 'function': {'name': 'x', 'arguments': {}}, 'k': __import__('os').getpid()}]",
     "Observation:\nfine"),
    ("Calling tools:\n[{'id': '', 'function': {'name': 'x', 'arguments': {}}}]", "Observation:\nfine"),
    ("Calling tools:\n[{'id': 'a', 'function': {'name': 'x', 'arguments': 'not json'}}]", "Observation:\nfine"),
])
def test_anything_else_stays_as_written(reply: str, after: str) -> None:
    items = (Item("user", "a question"), Item("assistant", reply), Item("user", after))
    assert read_text_exchanges(items) == items


def test_a_reply_with_native_calls_and_a_text_reply_last_stay_as_written() -> None:
    native = Item("assistant", smol_calls(("a", "x", {})), (ClientCall("a", "x", {}),))
    last = Item("assistant", smol_calls(("b", "x", {})))  # nothing after it: no result to read it with
    items = (Item("user", "q"), native, Item("tool", "r", call_id="a"), last)
    assert read_text_exchanges(items) == items


def test_native_exchanges_are_written_back_in_the_clients_text_form_and_read_again_as_they_were() -> None:
    """What the upstream is sent for a text-form client has the client's own form (``as_text_exchanges``),
    and reading that form again gives the native exchange: the two directions are one rule."""
    native = [{"role": "system", "content": "You are an agent."},
              {"role": "user", "content": [{"type": "text", "text": "New task:\nHow many people live in Lyon?"}]},
              {"role": "assistant", "content": "I will look.",
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "get_population", "arguments": '{"city": "Lyon"}'}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "Lyon: 522,250 inhabitants"}]
    written = as_text_exchanges(native)
    listed = str([{"id": "c1", "type": "function", "function": {"name": "get_population", "arguments": {"city": "Lyon"}}}])
    assert written[2] == {"role": "assistant", "content": [{"type": "text", "text": f"I will look.\nCalling tools:\n{listed}"}]}
    assert written[3] == {"role": "user", "content": [{"type": "text", "text": "Observation:\nLyon: 522,250 inhabitants"}]}
    # a reply with no text: smolagents joins its empty reply and its calls message with a newline
    silent = as_text_exchanges([{**native[2], "content": None}])[0]["content"][0]["text"]
    assert silent == f"\nCalling tools:\n{listed}"
    assert written[:2] == native[:2]
    read = read_openai({"model": "m", "messages": written})
    assert read_text_exchanges(read.items)[1:] == (
        Item("assistant", "I will look.", (ClientCall("c1", "get_population", {"city": "Lyon"}),)),
        Item("tool", "Lyon: 522,250 inhabitants", call_id="c1"))
    assert with_text_exchanges(read).text_exchanges and not with_text_exchanges(read_openai(
        {"model": "m", "messages": native})).text_exchanges


def test_a_failed_steps_error_merged_into_the_observation_is_a_user_message_of_its_own() -> None:
    """smolagents adds "Error: ... Now let's retry ..." after a step whose output it could not parse, merged
    into the observation before it: the result stays the one the session holds (no fork), the error is the
    client's words after it."""
    error = ("Error:\nError while parsing tool call from model output: Message contains no content and no tool calls\n"
             "Now let's retry: take care not to repeat previous errors! If you have retried several times, try a "
             "completely different approach.\n")
    items = read_text_exchanges([
        Item("user", "New task:\nWhich carrier ships O-1234?"),
        Item("assistant", smol_calls(("c1", "lookup_order", {"order_id": "O-1234"}))),
        Item("user", f"Observation:\nno order O-1234\n{error}")])
    assert items[1:] == (Item("assistant", "", (ClientCall("c1", "lookup_order", {"order_id": "O-1234"}),)),
                         Item("tool", "no order O-1234", call_id="c1"),
                         Item("user", error))
    # a result holding "Error:" lines of its own, without smolagents' retry sentence, stays whole
    own = "Error: disk full\nError:\nsee the log"
    assert read_text_exchanges([Item("assistant", smol_calls(("c2", "tail_log", {}))),
                                Item("user", f"Observation:\n{own}")])[1] == Item("tool", own, call_id="c2")
