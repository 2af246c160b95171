"""What a bundled model writes after a tool result: an answer, or the same call again.

The demo's live turns often end degraded through the repeated-call rule (docs/DRIFT.md): Qwen2.5-Coder-0.5B
calls ``list_dir`` or ``read_file``, gets the result, and calls the same tool again instead of answering.
This script shows it is the model, not the engine's assembly: the smallest conversation that has a tool
result, sent straight to the model's llama.cpp server (no planner, no tail, no catalogue), in three forms:

* ``native``: the OpenAI shape the loop sends (``tools``, an assistant ``tool_calls`` message, a ``tool``
  message), rendered by the model's own chat template (``<tool_call>`` / ``<tool_response>``);
* ``inline``: the probe's shape (tools listed in the system prompt, the call as a fenced block in the
  assistant's text, the result as a user message ``Tool result (name): ...``);
* ``native_then_ask`` / ``native_then_question``: the native shape followed by a user message "Do not
  call any tool now", with a generic ask or with the question again;
* ``in_question_with_tools``: the result pasted into the question, the tools still offered;
* ``in_question``: no tool at all: the result pasted into the user's question (the floor: can the model
  answer from the text when no call is offered?);
* ``native_masked``: the native shape as it is, the tools still declared, with ``tool_choice: none`` and
  a grammar without the characters a call opens with (``ANSWER_MASK``: a JSON object, a list, a fence,
  Qwen's ``<tool_call>``): "mask, don't remove", the answer step a loop could force with the prompt
  (and the server's cache of it) unchanged. ``tool_choice: none`` alone does not stop this model, and
  llama.cpp refuses a grammar beside tools unless tool_choice is none (HTTP 400), so the two go together.: what the loop's forced answer step sends after the repeated-call rule's second strike.

Each form is asked twice (listing a folder; reading a README), greedy (temperature 0), at most 64 tokens.
A reply that parses as a call to the tool that already ran is a re-call. Run:
``.venv/bin/python bench/after_result.py [--model qwen]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx

from vak_context.context.request.toolcalls import parse_tool_calls
from vak_context.providers.local.catalogue import ANSWER_MASK, canonical_model
from vak_context.providers.local.server import LocalModelServer

LISTING = "./ (6 entries)\nMakefile\t821 bytes\nREADME.md\t7,370 bytes\npyproject.toml\t2,688 bytes\nsrc/\ntests/\n"
README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")[:2400]
TOOLS = {
    "list_dir": "List the entries of a folder of the workspace.",
    "read_file": "Read a text file of the workspace.",
}
CASES = (  # (question, the tool the model called, its arguments, what it returned)
    ("List the files in the workspace.", "list_dir", {"path": "."}, LISTING),
    ("Read README.md and say in one sentence what this project is.", "read_file", {"path": "README.md"}, README),
)
SYSTEM = "You are a careful software agent working in the user's workspace through tools. Answer from what they return."


def _schema(name: str) -> dict[str, Any]:
    return {"name": name, "description": TOOLS[name],
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}


def native(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
    return {"tools": [{"type": "function", "function": _schema(t)} for t in TOOLS],
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question},
                         {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "call_1", "content": result}]}


def inline(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    listing = "\n".join(json.dumps(_schema(t)) for t in TOOLS)
    system = (f"{SYSTEM}\n\nTools you can call:\n{listing}\n\nTo call a tool, write only this:\n```tool_call\n"
              '{"name": "<tool>", "arguments": {...}}\n```\nWhen you have what you need, answer in plain text.')
    fence = "```tool_call\n" + json.dumps({"name": tool, "arguments": args}) + "\n```"
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question},
                         {"role": "assistant", "content": fence},
                         {"role": "user", "content": f"Tool result ({tool}):\n{result}"}]}


ASK = "Do not call any tool now. In one or two sentences, answer my request from the tool result above."


def native_then_ask(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    body = native(question, tool, args, result)
    return {**body, "messages": [*body["messages"], {"role": "user", "content": ASK}]}


def native_then_question(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    body = native(question, tool, args, result)
    ask = f"Do not call any tool now. From the tool result above: {question}"
    return {**body, "messages": [*body["messages"], {"role": "user", "content": ask}]}


def in_question(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": f"{tool}({json.dumps(args)}) returned:\n{result}\n\n{question}"}]}


def in_question_with_tools(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    return {**in_question(question, tool, args, result), "tools": native(question, tool, args, result)["tools"]}




def native_masked(question: str, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
    return {**native(question, tool, args, result), "tool_choice": "none", **ANSWER_MASK}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with LocalModelServer(canonical_model(args.model), n_ctx=4096) as server:
        headers = {"Authorization": f"Bearer {server.api_key}"}
        with httpx.Client(trust_env=False, timeout=600.0, headers=headers) as client:
            for form in (native, inline, native_then_ask, native_then_question, in_question_with_tools, in_question,
                         native_masked):
                for question, tool, call_args, result in CASES:
                    body = {**form(question, tool, call_args, result), "max_tokens": 64, "temperature": 0}
                    reply = client.post(f"{server.base_url}/chat/completions", json=body).json()
                    message = reply["choices"][0]["message"]
                    text = message.get("content") or ""
                    names = [c["function"]["name"] for c in message.get("tool_calls") or []]
                    if form is not in_question:  # no tool offered there: a quoted call is part of the answer
                        names += [c.name for c in parse_tool_calls(text, TOOLS) if c.name and c.complete]
                    verdict = "re-call" if tool in names else ("other call" if names else ("answer" if text.strip() else "empty"))
                    rows.append({"form": form.__name__, "tool": tool, "verdict": verdict, "reply": text[:120]})
                    print(f"{form.__name__:12} {tool:10} {verdict:10} {text[:100]!r}", flush=True)
    offered = [r for r in rows if r["form"] not in ("in_question", "native_masked")]
    recalls = sum(r["verdict"] == "re-call" for r in offered)
    masked = [r for r in rows if r["form"] == "native_masked"]
    print(f"\nre-calls after a result: {recalls} of {len(offered)} "
          f"(every form that offers a tool); answers with the result in the question: "
          f"{sum(r['verdict'] == 'answer' for r in rows if r['form'] == 'in_question')} of {len(CASES)}; "
          f"answers with the tools declared and calls masked: {sum(r['verdict'] == 'answer' for r in masked)} of {len(masked)}")
    return rows


if __name__ == "__main__":
    main()
