"""BFCL v4 multi-turn (the ``bfcl-eval`` package) as a third-party benchmark: its entries, its executable
backends and its own checker, with the model's calls made two ways (:mod:`vak_context.farm.bfcl.modes`).

The package is installed ``--no-deps`` (``make install``; its declared dependencies pin numpy and pull in
every vendor SDK) with the ``[bfcl]`` extra beside it. Only the multi-turn path is imported: the data
loaders (``bfcl_eval.utils``), ``execute_multi_turn_func_call``, ``multi_turn_checker`` and the OpenAI tool
conversion (``bfcl_eval.model_handler.utils``, which builds tree-sitter parsers at import). Never
``constants.model_config``, ``eval_runner`` or the CLI: they import every vendor SDK.
``BFCL_PROJECT_ROOT`` must be set before the first import, else the package makes its result folders
inside site-packages: :func:`bfcl` sets it to a scratch folder.

**Security.** BFCL pastes the model's tool name, and each argument's name, into an ``eval``. A call is run
only when its name is one the entry offers and matches ``^[A-Za-z_]\\w*$`` and every argument name matches
it too (:func:`screen`); any other call is refused with an error result and never reaches BFCL (neither the
backends nor the checker, which runs the model's calls again).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import json
import os
import re
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from vak_context.errors import InvalidInput, MissingExtra

CATEGORIES = ("multi_turn_base", "multi_turn_long_context")
SAFE_NAME = re.compile(r"^[A-Za-z_]\w*$")
MAX_STEPS = 20  # BFCL's handler force-terminates an entry after more steps than this in one turn
FORCE_TERMINATED = "multi_turn:force_terminated"  # BFCL's own error type for that
REFUSED = "refused: {why}. Call one of the tools this conversation offers, by its exact name."

_modules: dict[str, ModuleType] = {}


def bfcl(module: str = "utils") -> ModuleType:
    """``bfcl_eval.<module>``, imported with ``BFCL_PROJECT_ROOT`` pointed at a scratch folder first
    (kept if the caller set one); :class:`MissingExtra` when the package is not installed."""
    if module not in _modules:
        if importlib.util.find_spec("bfcl_eval") is None:
            raise MissingExtra("bfcl", "the BFCL benchmark (bfcl-eval, installed --no-deps by `make install`)")
        os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="vak-bfcl-"))
        _modules[module] = importlib.import_module(f"bfcl_eval.{module}")
    return _modules[module]


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn entry: its turns (each a list of user messages), the functions it offers (BFCL's
    own docs and as OpenAI tools), the ground truth (call strings per turn) and the raw record the checker
    reads."""

    id: str
    category: str
    turns: tuple[tuple[dict[str, Any], ...], ...]
    tools: tuple[dict[str, Any], ...]  # OpenAI chat-completions tools, as BFCL's FC handler sends them
    ground_truth: tuple[tuple[str, ...], ...]
    raw: Mapping[str, Any]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t["function"]["name"] for t in self.tools)

    def directive(self, turn: int) -> str:
        """A turn's user messages as one directive (the caller's loop takes one per turn)."""
        return "\n\n".join(str(m.get("content", "")) for m in self.turns[turn])


def load_entries(category: str, n: int) -> list[Entry]:
    """The first ``n`` entries of ``category`` in the file's order (fixed, so that runs compare)."""
    if category not in CATEGORIES:
        raise InvalidInput(f"BFCL category {category!r}: use one of {', '.join(CATEGORIES)}")
    utils = bfcl("utils")
    entries = utils.load_dataset_entry(category)[:n]
    truth = {t["id"]: t["ground_truth"] for t in utils.load_ground_truth_entry(category)}
    return [_entry(e, category, truth[e["id"]]) for e in entries]


def _entry(raw: dict[str, Any], category: str, truth: list[list[str]]) -> Entry:
    handler = bfcl("model_handler.utils")
    style = importlib.import_module("bfcl_eval.constants.enums").ModelStyle.OPENAI_COMPLETIONS
    mapping = importlib.import_module("bfcl_eval.constants.type_mappings").GORILLA_TO_OPENAPI
    tools = handler.convert_to_tool(raw["function"], mapping, style)  # [{"type": "function", "function": {...}}]
    turns = tuple(tuple(turn) for turn in raw["question"])
    return Entry(raw["id"], category, turns, tuple(tools), tuple(tuple(t) for t in truth), raw)


# ---------------------------------------------------------------- calls: screened, executed, scored


@dataclass(frozen=True)
class BfclCall:
    """A call as the model made it: its id, name and the argument text (JSON) or decoded object."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]


def screen(call: BfclCall, offered: frozenset[str]) -> tuple[str | None, str]:
    """(the call string BFCL executes, "") for a call that may run; (None, why) for one refused."""
    if not SAFE_NAME.match(call.name) or call.name not in offered:
        return None, REFUSED.format(why=f"{call.name[:80]!r} is not a tool this conversation offers")
    args: Any = call.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except json.JSONDecodeError as exc:
            return None, REFUSED.format(why=f"the arguments are not JSON ({exc.msg})")
    if not isinstance(args, dict):
        return None, REFUSED.format(why="the arguments are not a JSON object")
    bad = [k for k in args if not SAFE_NAME.match(str(k))]
    if bad:
        return None, REFUSED.format(why=f"argument name {str(bad[0])[:80]!r} is not an identifier")
    return bfcl("model_handler.utils").convert_to_function_call([{call.name: args}])[0], ""


def ground_truth_call(call_string: str, entry: Entry) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string (``mv(source='a', destination='b')``, ``sort('a.pdf')``) as (name,
    arguments): what a perfect model would send. Positional values take the parameter names in the order
    the entry's function declares them."""
    node = ast.parse(call_string, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise InvalidInput(f"ground-truth call {call_string!r} is not name(value, keyword=value, ...)")
    name = node.func.id
    schema: dict[str, Any] = next((t["function"]["parameters"] for t in entry.tools
                                   if t["function"]["name"] == name), {})
    params = list(schema.get("properties", {}))
    if len(node.args) > len(params):
        raise InvalidInput(f"ground-truth call {call_string!r} has more values than {name} has parameters")
    args = {params[i]: ast.literal_eval(v) for i, v in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    return name, args


_tags = itertools.count()


@dataclass
class Backend:
    """One entry's BFCL backends for one run: the model's calls screened and executed, the call strings
    per turn and step kept for the checker (:meth:`verdict`). The backend instances live in
    ``multi_turn_utils``' globals under a tag unique to this run and entry; :meth:`close` frees them."""

    entry: Entry
    tag: str = field(default_factory=lambda: f"vak_{uuid.uuid4().hex[:8]}_{next(_tags)}")
    decoded: list[list[list[str]]] = field(default_factory=list)  # per turn, per step, the calls run
    refused: int = 0
    force_terminated: bool = False

    def begin_turn(self) -> None:
        self.decoded.append([])

    def execute(self, calls: Sequence[BfclCall]) -> list[str]:
        """Each call's result (in order): BFCL's for the calls that may run, the refusal for the rest."""
        screened = [screen(c, self.entry.names) for c in calls]
        runnable = [s for s, _ in screened if s is not None]
        results = iter(self._run(runnable) if runnable else [])
        if runnable:
            self.decoded[-1].append(runnable)
        self.refused += len(calls) - len(runnable)
        return [next(results) if s is not None else why for s, why in screened]

    def _run(self, call_strings: list[str]) -> list[str]:
        utils = bfcl("eval_checker.multi_turn_eval.multi_turn_utils")
        raw = self.entry.raw
        results, _ = utils.execute_multi_turn_func_call(
            call_strings, raw.get("initial_config", {}), raw["involved_classes"], self.tag, self.entry.id,
            long_context="long_context" in self.entry.category)
        return [str(r) for r in results]

    def verdict(self) -> Verdict:
        """BFCL's checker on the calls made (it runs them again on fresh backends, beside the ground truth)."""
        if self.force_terminated or len(self.decoded) != len(self.entry.ground_truth):  # as eval_runner judges it
            return Verdict(False, FORCE_TERMINATED)
        checker = bfcl("eval_checker.multi_turn_eval.multi_turn_checker")
        out = checker.multi_turn_checker(self.decoded, [list(t) for t in self.entry.ground_truth],
                                         dict(self.entry.raw), self.entry.category, self.tag)
        return Verdict(bool(out.get("valid")), "" if out.get("valid") else str(out.get("error_type", "")))

    def close(self) -> None:
        """Free this run's backend instances (the module keeps them in its globals, keyed by tag)."""
        space = vars(bfcl("eval_checker.multi_turn_eval.multi_turn_utils"))
        prefix = re.sub(r"[-./:]", "_", self.tag)
        for name in [n for n in space if n.startswith(prefix)]:
            del space[name]


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error_type: str = ""  # BFCL's own, e.g. multi_turn:execution_response_mismatch
