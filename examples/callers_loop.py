"""Your own loop, the engine behind it: you send each request with your own HTTP client (OpenAI's chat
completions wire format here) and run your own two tools; the engine plans and projects every request,
records every reply, answers its own tools (recall, find_tools) and closes each turn with its card.

    OPENAI_API_KEY=sk-... python examples/callers_loop.py
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python examples/callers_loop.py   # another OpenAI-compatible server

tests/unit/test_examples.py runs it against a scripted model; docs/EMBEDDING.md explains it.
"""

import asyncio
import os
import subprocess

import httpx

import vak_context

NOTES = {"release": "0.1.0 shipped on 2026-12-01", "owner": "the platform team owns the ledger"}


def web_search(query: str) -> list[dict[str, str]]:
    """Search the team's notes; returns the matching notes, best first.

    Args:
        query: what to search for
    """
    words = set(query.lower().split())
    return [{"key": k, "text": v} for k, v in NOTES.items() if words & set(f"{k} {v}".lower().split())]


def run_command(command: str) -> str:
    """Run a shell command in the current folder; returns its output and exit code.

    Args:
        command: the command line
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return f"{done.stdout}{done.stderr}exit code: {done.returncode}"


TOOLS = {"web_search": web_search, "run_command": run_command}


async def turn(session: vak_context.Session, client: httpx.AsyncClient, directive: str,
               auth: dict[str, str]) -> vak_context.TurnResult:
    async with session.begin(directive) as open_turn:
        while (request := await open_turn.request()) is not None:  # None: the turn is done
            sent = await client.post(request.url, json=request.body, headers={**auth, **request.headers})
            action = await open_turn.reply(sent.json(), status=sent.status_code)
            for call in action.calls:  # only your tools: the engine answers its own
                try:
                    result = await asyncio.to_thread(TOOLS[call.name], **call.arguments)
                except Exception as exc:  # the model reads the error and the turn goes on
                    await open_turn.tool_result(call.id, exc)
                else:
                    await open_turn.tool_result(call.id, result)
    return open_turn.result


async def main(folder: str = "ledger", model: str = "openai:gpt-4o-mini",
               http_client: httpx.AsyncClient | None = None,
               base_url: str | None = os.environ.get("OPENAI_BASE_URL"), **binding: object) -> None:
    key = os.environ.get("OPENAI_API_KEY", "")
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    client = http_client or httpx.AsyncClient(timeout=120.0)
    try:
        with vak_context.Engine.open(folder) as engine:
            # The session's own client serves the engine's side calls (packet summaries); yours sends the turns.
            # vak's `openai:` spec ignores OPENAI_BASE_URL: it is passed on here (None: api.openai.com).
            async with engine.session("demo", model=model, tools=list(TOOLS.values()), http_client=client,
                                      base_url=base_url, **binding) as session:
                for directive in ("search the notes for the release", "run echo hello"):
                    result = await turn(session, client, directive, auth)
                    print(f"[{result.outcome}] {result.answer}")
                    print(result.card.text)
    finally:
        if http_client is None:  # the one made here
            await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
