"""BFCL v4 single-turn categories (``simple_python``, ``multiple``, ``parallel``; their answers ship with the
``bfcl-eval`` package) and BFCL's own AST checker, for :mod:`.history`.

**The checker's import.** ``bfcl_eval.eval_checker.ast_eval.ast_checker`` imports
``bfcl_eval.constants.model_config``, which imports every vendor SDK (and fails without them). The checker
reads one thing from it: ``MODEL_CONFIG_MAPPING[model_name].underscore_to_dot``, whether the model's
function names had their dots replaced by underscores (OpenAI allows no dot in a tool name, so BFCL's
``convert_to_tool`` sends ``math.factorial`` as ``math_factorial`` and the checker compares the answer's
name the same way). :func:`ast_checker` puts a one-model stand-in for that module in ``sys.modules`` while it
imports the checker (and takes it out again after, so nothing else ever sees it), with
:data:`CHECKER_MODEL` mapped to ``underscore_to_dot=True``, as BFCL maps its OpenAI FC models. Were the real
module already imported, :data:`CHECKER_MODEL` is added to its mapping instead.

**A reply** is decoded as BFCL's OpenAI FC handler decodes one (``decode_ast``: each tool call's name and
its arguments' JSON); a reply with no call, or arguments that are not JSON, fails as BFCL's
``ast_decoder:decoder_failed``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vak_context.errors import InvalidInput
from vak_context.farm.bfcl.multiturn import Verdict, bfcl

CATEGORIES = ("simple_python", "multiple", "parallel")
CHECKER_MODEL = "vak-openai-fc"  # the model name the checker is told (no "_": BFCL reads "_" in it as "/")
MODEL_CONFIG = "bfcl_eval.constants.model_config"
DECODER_FAILED = "ast_decoder:decoder_failed"  # BFCL's own error type for a reply it cannot decode


@dataclass(frozen=True)
class CheckerConfig:
    """What the AST checker reads of BFCL's ``ModelConfig``."""

    underscore_to_dot: bool = True
    is_fc_model: bool = True


_checker: list[types.ModuleType] = []


def ast_checker() -> types.ModuleType:
    """BFCL's ``ast_checker`` module, imported without ``constants.model_config`` (module docstring)."""
    if _checker:
        return _checker[0]
    bfcl("utils")  # sets BFCL_PROJECT_ROOT first; MissingExtra without the package
    real = sys.modules.get(MODEL_CONFIG)
    stub = None
    if real is None:
        stub = types.ModuleType(MODEL_CONFIG, "a stand-in: the AST checker reads only underscore_to_dot")
        stub.MODEL_CONFIG_MAPPING = {}  # type: ignore[attr-defined]
        sys.modules[MODEL_CONFIG] = stub
    try:
        module = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    finally:
        if stub is not None and sys.modules.get(MODEL_CONFIG) is stub:
            del sys.modules[MODEL_CONFIG]
    module.MODEL_CONFIG_MAPPING.setdefault(CHECKER_MODEL, CheckerConfig())
    _checker.append(module)
    return module


@dataclass(frozen=True)
class SingleEntry:
    """One single-turn entry: its question (user messages), its functions (BFCL's docs, and as the OpenAI
    tools BFCL's FC handler sends: dots in names made underscores) and its possible answers."""

    id: str
    category: str
    question: tuple[dict[str, Any], ...]
    functions: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    answer: tuple[dict[str, Any], ...]  # [{name: {param: [allowed values, "" when optional]}}]

    @property
    def text(self) -> str:
        return "\n\n".join(str(m.get("content", "")) for m in self.question if m.get("role") == "user")


def load_single(category: str, n: int) -> list[SingleEntry]:
    """The first ``n`` entries of ``category`` in the file's order, with the functions' language hint as
    BFCL's handler sends them."""
    if category not in CATEGORIES:
        raise InvalidInput(f"BFCL single-turn category {category!r}: use one of {', '.join(CATEGORIES)}")
    utils = bfcl("utils")
    handler = bfcl("model_handler.utils")
    style = importlib.import_module("bfcl_eval.constants.enums").ModelStyle.OPENAI_COMPLETIONS
    mapping = importlib.import_module("bfcl_eval.constants.type_mappings").GORILLA_TO_OPENAPI
    entries = utils.load_dataset_entry(category)[:n]
    answers = {a["id"]: a["ground_truth"] for a in utils.load_ground_truth_entry(category)}
    out = []
    for raw in entries:
        tools = handler.convert_to_tool(raw["function"], mapping, style)
        out.append(SingleEntry(raw["id"], category, tuple(raw["question"][0]), tuple(raw["function"]),
                               tuple(tools), tuple(answers[raw["id"]])))
    return out


def decode(calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> list[dict[str, Any]] | None:
    """BFCL's FC ``decode_ast``: ``[{name: arguments}]``; None where an argument text is not a JSON object."""
    out = []
    for name, arguments in calls:
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError:
            return None
        if not isinstance(args, dict):
            return None
        out.append({name: args})
    return out


def check(entry: SingleEntry, calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> Verdict:
    """BFCL's AST checker on one reply's calls (name, arguments JSON), as its eval runner judges a FC reply."""
    decoded = decode(calls) if calls else None
    if decoded is None:
        return Verdict(False, DECODER_FAILED)
    language = importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON
    out = ast_checker().ast_checker(list(entry.functions), decoded, list(entry.answer), language,
                                    entry.category, CHECKER_MODEL)
    return Verdict(bool(out.get("valid")), "" if out.get("valid") else str(out.get("error_type", "")))


def tool_name(name: str) -> str:
    """A function's name as BFCL's OpenAI FC handler offers it (``convert_to_tool``: dots made underscores)."""
    return re.sub(r"\.", "_", name)


def truth_calls(entry: SingleEntry) -> list[tuple[str, str]]:
    """A perfect reply: each answer's function (by its offered name) with, per parameter, the first allowed
    value that is not "" (a parameter whose only allowed value is "", optional, left out; a dict's values
    chosen the same way, as the answers nest them)."""
    calls = []
    for answer in entry.answer:
        for name, params in answer.items():
            args = {k: _pick(v) for k, v in params.items() if any(x != "" for x in v)}
            calls.append((tool_name(name), json.dumps(args)))
    return calls


def _pick(allowed: list[Any]) -> Any:
    value = next(x for x in allowed if x != "")
    if isinstance(value, dict):
        return {k: _pick(v) for k, v in value.items() if isinstance(v, list) and any(x != "" for x in v)}
    return value
