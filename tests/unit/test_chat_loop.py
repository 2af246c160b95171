"""`vak chat`'s loop over lines (``vak_context.cli.chat.chat_loop``), without a model: a turn per line, and a
turn that fails on the model's side is reported while the session goes on."""

from __future__ import annotations

from typing import Any

import pytest

import vak_context
from vak_context.cli.chat import Streamer, chat_loop
from vak_context.errors import ModelServerError, ProviderRequestError, RetryableProviderError


class Session:
    """What the loop needs of a public ``Session``: ``run``. Each directive gets the next scripted outcome."""

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes, self.asked = outcomes, []  # type: list[Any], list[str]

    async def run(self, directive: str) -> vak_context.TurnResult:
        self.asked.append(directive)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        card = vak_context.Card(id="c" * 64, turn=len(self.asked), asked=directive, outcome="completed", text="")
        return vak_context.TurnResult(answer=outcome, outcome="completed", card=card, steps=())


def _reader(lines: list[str]) -> Any:
    async def read() -> str:
        if not lines:
            raise EOFError
        return lines.pop(0)
    return read


@pytest.mark.parametrize("error", [
    RetryableProviderError("openai-compat: HTTP 500 from the server after 3 attempts; retry later", provider="x"),
    ProviderRequestError("openai-compat: HTTP 400: bad field", provider="x"),
    ModelServerError("the local server is not reachable at 127.0.0.1:1; restart vak chat"),
])
async def test_a_failed_turn_is_reported_and_the_next_line_is_still_a_turn(
        capsys: pytest.CaptureFixture[str], error: Exception) -> None:
    """The failing turn's error is printed with what to do next; the following line runs as a turn and its
    answer is shown; blank lines are skipped; EOF ends the session with exit 0."""
    session = Session([error, "Alpha and beta."])
    code = await chat_loop(session, _reader(["first", "  ", "second"]), Streamer())
    out = capsys.readouterr().out
    assert code == 0 and session.asked == ["first", "second"]
    assert f"vak: this turn failed: {error}" in out and "Ask again, or /quit" in out
    assert out.index("this turn failed") < out.index("Alpha and beta.")


async def test_quit_ends_the_session_and_other_errors_are_not_swallowed() -> None:
    """``/quit`` ends at once; an error that is not the model's (a bug, a ledger failure) propagates."""
    assert await chat_loop(Session([]), _reader(["/quit", "never"]), Streamer()) == 0
    with pytest.raises(ZeroDivisionError):
        await chat_loop(Session([ZeroDivisionError()]), _reader(["x"]), Streamer())
