"""The farm spec's checks: parsed TOML into ``vak_context.farm.spec.entries`` objects, or a ``FarmSpecError``
that names the file, the line, the key and the fix. Every name becomes a path component of the run
folder, so each is checked with ``vak_context.names.check_name``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.errors import FarmSpecError, InvalidName
from vak_context.farm.spec.entries import (
    BFCL_HISTORY_SIZES,
    BFCL_MODES,
    BFCL_THRESHOLDS,
    EXPECTS,
    MODEL_KINDS,
    QUICK_PROBE,
    SESSION_KINDS,
    SHARED_PREFIX,
    TASK_KINDS,
    BfclDegradeTask,
    BfclHistoryTask,
    BfclTask,
    FarmSpec,
    LiveTask,
    ModelEntry,
    ProbeTask,
    ReplayTask,
    SessionEntry,
    Task,
    shared_root,
)
from vak_context.names import check_name

T = TypeVar("T")


class SpecParser:
    """One spec's TOML (``data``, with its ``text`` for line numbers) into a ``FarmSpec``."""

    def __init__(self, data: dict[str, Any], text: str, where: str, base: Path) -> None:
        self.data, self.lines, self.where, self.base = data, text.splitlines(), where, base

    # -- locating: the line of the n-th [[table]] (or [table]) header, and of a key inside it

    def line(self, table: str, index: int | None = None, key: str = "") -> int | None:
        header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]" if index is not None
                            else rf"^\s*\[\s*{re.escape(table)}\s*\]")
        seen, start = -1, None
        for n, text in enumerate(self.lines, 1):
            if header.match(text):
                seen += 1
                if index is None or seen == index:
                    start = n
                    break
        if start is None:
            return None
        if key:
            keyline = re.compile(rf"^\s*{re.escape(key)}\s*=")
            for n in range(start, len(self.lines)):
                text = self.lines[n]
                if text.lstrip().startswith("["):
                    break
                if keyline.match(text):
                    return n + 1
        return start

    def fail(self, message: str, table: str, index: int | None = None, key: str = "") -> FarmSpecError:
        label = f"{table}[{index}]" if index is not None else table
        return FarmSpecError(message, path=self.where, line=self.line(table, index, key),
                             key=f"{label}.{key}" if key else label)

    # -- typed fields

    def get(self, table: dict[str, Any], tname: str, i: int | None, key: str, kind: type[T], default: T,
            *, low: float | None = None, high: float | None = None) -> T:
        if key not in table:
            return default
        value = table[key]
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.fail(f"must be a {kind.__name__}, got {value!r}.", tname, i, key)
        number: Any = value
        if (low is not None and number < low) or (high is not None and number > high):
            raise self.fail(f"{value!r} is out of range: use a value from {low} to {high}.", tname, i, key)
        return cast(T, number)

    def optional_int(self, table: dict[str, Any], tname: str, i: int, key: str, low: int, high: int) -> int | None:
        if key not in table:
            return None
        return self.get(table, tname, i, key, int, 0, low=low, high=high)

    def names(self, table: dict[str, Any], tname: str, i: int, key: str, known: Sequence[str]) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"must be a list of names, e.g. {key} = [{', '.join(repr(k) for k in known[:2])}].",
                            tname, i, key)
        unknown = [v for v in value if v not in known]
        if unknown:
            raise self.fail(f"{unknown} not defined in the spec; defined: {list(known)}.", tname, i, key)
        if len(set(value)) != len(value):
            raise self.fail("names a model or session twice; list each once.", tname, i, key)
        return tuple(value)

    def check_keys(self, table: dict[str, Any], tname: str, i: int | None, allowed: set[str]) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise self.fail(f"unknown key(s) {unknown}; this table accepts {sorted(allowed)}. Remove or rename them.",
                            tname, i, unknown[0])

    def name(self, table: dict[str, Any], tname: str, i: int | None, what: str) -> str:
        if "name" not in table:
            raise self.fail(f"needs a name = \"...\" (it names the {what}'s files in the run folder).", tname, i)
        try:
            return check_name(table["name"], f"{what} name")
        except InvalidName as exc:
            raise self.fail(str(exc), tname, i, "name") from exc

    def path(self, table: dict[str, Any], tname: str, i: int, key: str) -> Path:
        raw = self.get(table, tname, i, key, str, "")
        if not raw:
            raise self.fail(f"needs {key} = \"...\" (a path; shared:REST for the shared data folder).", tname, i)
        if raw.startswith(SHARED_PREFIX):
            return shared_root() / raw[len(SHARED_PREFIX):]
        p = Path(raw).expanduser()
        return p if p.is_absolute() else self.base / p

    def tables(self, key: str) -> list[dict[str, Any]]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise FarmSpecError(f"write each as an array of tables: [[{key}]] followed by its keys.",
                                path=self.where, line=self.line(key), key=key)
        return value

    # -- the spec

    def spec(self, source: Path | None) -> FarmSpec:
        unknown = sorted(set(self.data) - {"farm", "models", "sessions", "tasks"})
        if unknown:
            raise FarmSpecError(f"unknown top-level key(s) {unknown}; a farm spec has [farm], [[models]], "
                                "[[sessions]] and [[tasks]].", path=self.where, line=self.line(unknown[0]),
                                key=unknown[0])
        farm = self.data.get("farm", {})
        if not isinstance(farm, dict):
            raise FarmSpecError("[farm] must be a table with a name.", path=self.where, key="farm")
        self.check_keys(farm, "farm", None, {"name"})
        name = self.name(farm, "farm", None, "farm") if farm else "farm"
        models = tuple(self.model(t, i) for i, t in enumerate(self.tables("models")))
        sessions = tuple(self.session(t, i) for i, t in enumerate(self.tables("sessions")))
        self.unique("models", [m.name for m in models], "names")
        self.unique("sessions", [s.name for s in sessions], "names")
        if not models:
            raise FarmSpecError("the spec defines no [[models]]; add at least one.", path=self.where, key="models")
        mnames = [m.name for m in models]
        snames = [s.name for s in sessions]
        tasks = tuple(self.task(t, i, mnames, snames) for i, t in enumerate(self.tables("tasks")))
        if not tasks:
            raise FarmSpecError("the spec defines no [[tasks]]; add a probe, replay, live, bfcl, bfcl_history or bfcl_degrade task.",
                                path=self.where, key="tasks")
        self.unique("tasks", [t.name for t in tasks], "task names")
        return FarmSpec(name=name, models=models, sessions=sessions, tasks=tasks, source=source)

    def unique(self, table: str, names: list[str], what: str) -> None:
        """Fail on the first name of ``table`` that an earlier entry already took."""
        seen: set[str] = set()
        for i, item in enumerate(names):
            if item in seen:
                raise self.fail(f"{item!r} is defined twice; {what} must be unique.", table, i, "name")
            seen.add(item)

    def named_kind(self, t: dict[str, Any], tname: str, i: int, what: str, kinds: Sequence[str], default: str,
                   *, label: str = "") -> tuple[str, str]:
        """An entry's checked name and its kind, one of ``kinds`` (``default`` when it names none)."""
        name = self.name(t, tname, i, what)
        kind = self.get(t, tname, i, "kind", str, default)
        if kind not in kinds:
            raise self.fail(f"{label}{kind!r} is not one of {list(kinds)}.", tname, i, "kind")
        return name, kind

    def model(self, t: dict[str, Any], i: int) -> ModelEntry:
        tn = "models"
        name, kind = self.named_kind(t, tn, i, "model", MODEL_KINDS, "local")
        common = {"name", "kind", "window", "horizon", "output_reserve", "tokens_per_char"}
        per_kind = {"local": {"model", "n_ctx", "threads", "n_parallel", "resource"},
                    "endpoint": {"model", "base_url", "api_key_env"}, "hosted": {"spec"}}
        self.check_keys(t, tn, i, common | per_kind[kind])
        fields: dict[str, Any] = {
            "window": self.optional_int(t, tn, i, "window", 256, 10_000_000),
            "horizon": self.optional_int(t, tn, i, "horizon", 256, 10_000_000),
            "output_reserve": self.get(t, tn, i, "output_reserve", int, 512, low=16, high=200_000),
            "tokens_per_char": self.get(t, tn, i, "tokens_per_char", float, PRIOR_TOKENS_PER_CHAR, low=0.01, high=4.0),
        }
        if kind == "local":
            model = self.get(t, tn, i, "model", str, name)
            if model.endswith(".gguf"):
                p = Path(model).expanduser()
                model = str(p if p.is_absolute() else self.base / p)
            fields |= {"model": model,
                       "n_ctx": self.get(t, tn, i, "n_ctx", int, 4096, low=256, high=1_048_576),
                       "threads": self.get(t, tn, i, "threads", int, 1, low=1, high=256),
                       "n_parallel": self.get(t, tn, i, "n_parallel", int, 1, low=1, high=64),
                       "resource": self.get(t, tn, i, "resource", str, "vak_model_node")}
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", fields["resource"]):
                raise self.fail("a Ray resource name is letters, digits and '_', starting with a letter.",
                                tn, i, "resource")
        elif kind == "endpoint":
            base_url = self.get(t, tn, i, "base_url", str, "")
            if not base_url.startswith(("http://", "https://")):
                raise self.fail("needs base_url = \"http://HOST:PORT/v1\" (an OpenAI-compatible server).",
                                tn, i, "base_url")
            key_env = self.get(t, tn, i, "api_key_env", str, "")
            if key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
                raise self.fail("name an environment variable (letters, digits, '_'), never the key itself.",
                                tn, i, "api_key_env")
            fields |= {"model": self.get(t, tn, i, "model", str, ""), "base_url": base_url, "api_key_env": key_env}
        else:
            spec = self.get(t, tn, i, "spec", str, "")
            if ":" not in spec:
                raise self.fail("needs spec = \"provider:model\", e.g. \"anthropic:claude-sonnet-4-5\".", tn, i, "spec")
            from vak_context.errors import InvalidInput
            from vak_context.providers.registry import parse_spec

            try:
                parse_spec(spec)
            except InvalidInput as exc:
                raise self.fail(str(exc), tn, i, "spec") from exc
            fields["spec"] = spec
        return ModelEntry(name=name, kind=kind, **fields)  # type: ignore[arg-type]

    def session(self, t: dict[str, Any], i: int) -> SessionEntry:
        tn = "sessions"
        name, kind = self.named_kind(t, tn, i, "session", SESSION_KINDS, "recording")
        allowed = {"recording": {"path", "select"}, "ledger": {"path", "session"}, "generated": {"seed", "turns"}}
        self.check_keys(t, tn, i, {"name", "kind"} | allowed[kind])
        if kind == "generated":
            return SessionEntry(name=name, kind="generated",
                                seed=self.get(t, tn, i, "seed", int, 0, low=0, high=2**31),
                                turns=self.get(t, tn, i, "turns", int, 12, low=1, high=500))
        path = self.path(t, tn, i, "path")
        if kind == "recording":
            if not path.is_file():
                raise self.fail(f"no recorded session file at {path}. Check the path (shared:REST resolves "
                                f"against {shared_root()}; set VAK_SHARED to move it).", tn, i, "path")
            return SessionEntry(name=name, kind="recording", path=path, select=self.get(t, tn, i, "select", str, ""))
        if not path.is_dir():
            raise self.fail(f"no ledger folder at {path}. Name a folder `vak import` or `vak run` wrote.",
                            tn, i, "path")
        session = self.get(t, tn, i, "session", str, name)
        try:
            check_name(session, "session name")
        except InvalidName as exc:
            raise self.fail(str(exc), tn, i, "session") from exc
        return SessionEntry(name=name, kind="ledger", path=path, session=session)

    def task(self, t: dict[str, Any], i: int, models: list[str], sessions: list[str]) -> Task:
        tn = "tasks"
        name, kind = self.named_kind(t, tn, i, "task", TASK_KINDS, "", label="kind ")
        ms = self.names(t, tn, i, "models", models)
        if kind == "probe":
            return self.probe_task(t, i, name, ms)
        if kind == "replay":
            return self.replay_task(t, i, name, ms, sessions)
        if kind == "bfcl":
            return self.bfcl_task(t, i, name, ms)
        if kind == "bfcl_history":
            return self.bfcl_history_task(t, i, name, ms)
        if kind == "bfcl_degrade":
            return self.bfcl_degrade_task(t, i, name)
        return self.live_task(t, i, name, ms, sessions)

    def probe_task(self, t: dict[str, Any], i: int, name: str, ms: tuple[str, ...]) -> ProbeTask:
        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "models", "quick", "window", "first_rung", "max_sizes",
                                   "samples", "controls", "protocol", "cache_rung", "max_tokens"})
        quick = self.get(t, tn, i, "quick", bool, False)
        base: Mapping[str, Any] = QUICK_PROBE if quick else {}
        protocol = self.get(t, tn, i, "protocol", str, "") or None
        if protocol not in (None, "native", "inline_fence"):
            raise self.fail(f"{protocol!r} is not native or inline_fence.", tn, i, "protocol")
        window = self.optional_int(t, tn, i, "window", 256, 10_000_000)
        max_sizes = self.optional_int(t, tn, i, "max_sizes", 1, 100)
        return ProbeTask(
            name=name, models=ms, protocol=protocol,  # type: ignore[arg-type]
            window=window if window is not None else base.get("window"),
            first_rung=self.get(t, tn, i, "first_rung", int, base.get("first_rung", 4096), low=64,
                                high=10_000_000),
            max_sizes=max_sizes if max_sizes is not None else base.get("max_sizes"),
            samples=self.get(t, tn, i, "samples", int, base.get("samples", 3), low=1, high=25),
            controls=self.get(t, tn, i, "controls", int, base.get("controls", 1), low=0, high=25),
            cache_rung=self.get(t, tn, i, "cache_rung", bool, False),
            max_tokens=self.get(t, tn, i, "max_tokens", int, 32, low=1, high=4096),
        )

    def replay_task(self, t: dict[str, Any], i: int, name: str, ms: tuple[str, ...], sessions: list[str]) -> ReplayTask:
        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "models", "sessions"})
        ss = self.names(t, tn, i, "sessions", sessions)
        if not (ss or sessions):
            raise self.fail("a replay needs sessions: add [[sessions]] to the spec.", tn, i)
        return ReplayTask(name=name, models=ms, sessions=ss)

    def live_task(self, t: dict[str, Any], i: int, name: str, ms: tuple[str, ...], sessions: list[str]) -> LiveTask:
        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "models", "session", "directives", "turns", "repeats", "require",
                                   "expect", "max_steps", "max_tokens"})
        session = self.get(t, tn, i, "session", str, "")
        if session not in sessions:
            raise self.fail(f"needs session = one of {sessions} (the history the directives run after).",
                            tn, i, "session")
        directives = t.get("directives", [])
        if not isinstance(directives, list) or not all(isinstance(d, str) and d.strip() for d in directives):
            raise self.fail("must be a list of non-empty directive texts.", tn, i, "directives")
        turns = t.get("turns", [])
        if not isinstance(turns, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                                  for n in turns):
            raise self.fail("must be a list of recorded turn numbers (1 is the first turn).", tn, i, "turns")
        if not directives and not turns:
            raise self.fail("needs directives = [\"...\"] or turns = [N]: what to run live.", tn, i)
        repeats = self.get(t, tn, i, "repeats", int, 3, low=1, high=100)
        require = self.get(t, tn, i, "require", int, 1, low=0, high=100)
        if require > repeats:
            raise self.fail(f"require = {require} is more than repeats = {repeats}; it could never pass.",
                            tn, i, "require")
        expect = self.get(t, tn, i, "expect", str, "answer")
        if expect not in EXPECTS:
            raise self.fail(f"{expect!r} is not one of {list(EXPECTS)}.", tn, i, "expect")
        return LiveTask(name=name, models=ms, session=session, directives=tuple(directives), turns=tuple(turns),
                        repeats=repeats, require=require, expect=expect,  # type: ignore[arg-type]
                        max_steps=self.get(t, tn, i, "max_steps", int, 2, low=1, high=20),
                        max_tokens=self.get(t, tn, i, "max_tokens", int, 96, low=8, high=4096))

    def bfcl_task(self, t: dict[str, Any], i: int, name: str, ms: tuple[str, ...]) -> BfclTask:
        from vak_context.farm.bfcl.multiturn import CATEGORIES

        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "models", "categories", "entries", "modes", "window",
                                   "max_tokens"})
        categories = self.choices(t, i, "categories", CATEGORIES)
        modes = self.choices(t, i, "modes", BFCL_MODES)
        return BfclTask(name=name, models=ms, categories=categories, modes=modes,
                        entries=self.get(t, tn, i, "entries", int, 200, low=1, high=200),
                        window=self.optional_int(t, tn, i, "window", 1024, 10_000_000),
                        max_tokens=self.get(t, tn, i, "max_tokens", int, 1024, low=16, high=32_768))

    def bfcl_history_task(self, t: dict[str, Any], i: int, name: str, ms: tuple[str, ...]) -> BfclHistoryTask:
        from vak_context.farm.bfcl.single import CATEGORIES

        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "models", "categories", "entries", "sizes", "modes", "history",
                                   "select", "window", "max_tokens"})
        history = self.path(t, tn, i, "history") if "history" in t else None
        if history is not None and not history.is_file():
            raise self.fail(f"no recorded session file at {history}. Check the path (shared:REST resolves "
                            f"against {shared_root()}).", tn, i, "history")
        return BfclHistoryTask(name=name, models=ms, categories=self.choices(t, i, "categories", CATEGORIES),
                               entries=self.get(t, tn, i, "entries", int, 20, low=1, high=400),
                               sizes=self.sizes(t, i, "sizes", BFCL_HISTORY_SIZES),
                               modes=self.choices(t, i, "modes", BFCL_MODES), history=history,
                               select=self.get(t, tn, i, "select", str, ""),
                               window=self.optional_int(t, tn, i, "window", 1024, 10_000_000),
                               max_tokens=self.get(t, tn, i, "max_tokens", int, 512, low=16, high=32_768))

    def bfcl_degrade_task(self, t: dict[str, Any], i: int, name: str) -> BfclDegradeTask:
        from vak_context.farm.bfcl.multiturn import CATEGORIES

        tn = "tasks"
        self.check_keys(t, tn, i, {"name", "kind", "categories", "entries", "thresholds", "modes", "perfect"})
        return BfclDegradeTask(name=name, categories=self.choices(t, i, "categories", CATEGORIES),
                               entries=self.get(t, tn, i, "entries", int, 200, low=1, high=200),
                               thresholds=self.sizes(t, i, "thresholds", BFCL_THRESHOLDS, low=256),
                               modes=self.choices(t, i, "modes", BFCL_MODES),
                               perfect=self.get(t, tn, i, "perfect", bool, True))

    def sizes(self, t: dict[str, Any], i: int, key: str, default: tuple[int, ...], *, low: int = 0) -> tuple[int, ...]:
        """A non-empty list of distinct token sizes, sorted; ``default`` when the key is absent."""
        value = t.get(key, list(default))
        if (not isinstance(value, list) or not value or len(set(value)) != len(value)
                or not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= 10_000_000 for v in value)):
            raise self.fail(f"must be a non-empty list of distinct token counts of at least {low}, e.g. "
                            f"{key} = {list(default)}.", "tasks", i, key)
        return tuple(sorted(value))

    def choices(self, t: dict[str, Any], i: int, key: str, known: tuple[str, ...]) -> tuple[str, ...]:
        """A list of some of ``known`` (each once, in ``known``'s order); every one when the key is absent."""
        value = t.get(key, list(known))
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.fail(f"must be a non-empty list, e.g. {key} = {list(known)}.", "tasks", i, key)
        unknown = [v for v in value if v not in known]
        if unknown or len(set(value)) != len(value):
            raise self.fail(f"{unknown or value} is not a list of distinct names from {list(known)}.", "tasks", i, key)
        return tuple(k for k in known if k in value)
