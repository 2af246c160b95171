"""The farm spec: one TOML file naming the models, the sessions and the tasks of an eval farm.

``load_farm_spec(path)`` reads it into frozen, typed objects (``FarmSpec``); anything wrong is a
``FarmSpecError`` naming the file, the line, the key and the fix. Every name (farm, model, session,
task) becomes a path component of the run folder, so each is checked with ``vak.names.check_name``.

::

    [farm]
    name = "small"                       # the run id defaults to <name>-<digest of the spec>

    [[models]]
    name = "smollm2"
    kind = "local"                       # local | endpoint | hosted
    model = "smollm2"                    # a bundled alias (smollm2, qwen, gemma3-270m) or a .gguf path
    n_ctx = 4096                         # local only: the server's window (also the profile's window)
    threads = 1                          # local only: llama.cpp threads
    # horizon, window, output_reserve, tokens_per_char: the profile replay projects under
    # (default: the window as the horizon, as a metadata-only profile is)

    [[models]]
    name = "box"
    kind = "endpoint"                    # any OpenAI-compatible server
    base_url = "http://127.0.0.1:8000/v1"
    model = "served-name"
    api_key_env = "BOX_KEY"              # the variable holding its key (never the key itself)
    window = 32768

    [[models]]
    name = "sonnet"
    kind = "hosted"
    spec = "anthropic:claude-sonnet-4-5" # provider:model, as `vak probe` takes it
    window = 200000                      # probed only when the operator config says [probe] hosted = "full"

    [[sessions]]
    name = "tau9"
    kind = "recording"                   # recording | ledger | generated
    path = "shared:data/trajectories/tau-bench__gpt-4o-airline.json"
    select = "task9-trial3"              # which recording of a file that holds several (a name suffix)

    [[sessions]]
    name = "gen"
    kind = "generated"
    seed = 7
    turns = 12

    [[tasks]]
    name = "ladder"
    kind = "probe"                       # probe | replay | live
    models = ["smollm2"]                 # default: every model the task can run on
    quick = true                         # a small ladder: window 2048, 2 sizes, 1 sample, no controls

    [[tasks]]
    name = "replay"
    kind = "replay"
    sessions = ["tau9", "gen"]           # default: every session

    [[tasks]]
    name = "card"
    kind = "live"
    models = ["smollm2"]
    session = "tau9"
    directives = ["Record what you found as a card."]   # or turns = [3]: re-run recorded turn 3
    repeats = 6
    require = 5                          # pass when >= 5 of the 6 runs show the expected outcome
    expect = "card"                      # card | answer | tool_call

Relative paths resolve against the spec file's folder; ``shared:REST`` resolves against the shared data
folder (``$VAK_SHARED``, else ``../shared`` next to the checkout).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from vak.errors import FarmSpecError, InvalidName
from vak.names import check_name

ModelKind = Literal["local", "endpoint", "hosted"]
SessionKind = Literal["recording", "ledger", "generated"]
TaskKind = Literal["probe", "replay", "live"]
Expect = Literal["card", "answer", "tool_call"]
MODEL_KINDS: tuple[str, ...] = ("local", "endpoint", "hosted")
SESSION_KINDS: tuple[str, ...] = ("recording", "ledger", "generated")
TASK_KINDS: tuple[str, ...] = ("probe", "replay", "live")
EXPECTS: tuple[str, ...] = ("card", "answer", "tool_call")
REPO = Path(__file__).resolve().parent.parent
SHARED_PREFIX = "shared:"
# The quick ladder: small enough for a few minutes on 2 cores with a 135M model.
QUICK_PROBE = {"window": 2048, "first_rung": 1024, "max_sizes": 2, "samples": 1, "controls": 0}


@dataclass(frozen=True)
class ModelEntry:
    """One model of the farm. ``profile_*`` fields are what replay projects under."""

    name: str
    kind: ModelKind
    model: str = ""  # local: alias or .gguf path; endpoint: the served model name
    spec: str = ""  # hosted: provider:model
    base_url: str = ""  # endpoint
    api_key_env: str = ""  # endpoint: the environment variable that holds the key
    n_ctx: int = 4096  # local
    threads: int = 1  # local
    n_parallel: int = 1  # local
    resource: str = "vak_model_node"  # local: the custom resource a node serving models advertises
    window: int | None = None  # declared window (local: n_ctx)
    horizon: int | None = None  # instruction horizon for replay (default: the window)
    output_reserve: int = 512
    tokens_per_char: float = 0.25

    @property
    def declared_window(self) -> int:
        if self.window is not None:
            return self.window
        return self.n_ctx if self.kind == "local" else 8192

    @property
    def replay_horizon(self) -> int:
        return self.horizon if self.horizon is not None else self.declared_window

    @property
    def provider(self) -> str:
        """The ProfileKey provider: ``local``, ``openai-compat`` or the hosted spec's provider."""
        if self.kind == "local":
            return "local"
        if self.kind == "endpoint":
            return "openai-compat"
        return self.spec.partition(":")[0]


@dataclass(frozen=True)
class SessionEntry:
    name: str
    kind: SessionKind
    path: Path | None = None  # recording: the file; ledger: the ledger folder
    select: str = ""  # recording: a suffix of the recording's name in a file holding several
    session: str = ""  # ledger: the session's name in that ledger
    seed: int = 0  # generated
    turns: int = 12  # generated


@dataclass(frozen=True)
class ProbeTask:
    name: str
    models: tuple[str, ...]
    kind: Literal["probe"] = "probe"
    window: int | None = None  # probe as if this were the declared window (a smaller ladder)
    first_rung: int = 4096
    max_sizes: int | None = None
    samples: int = 3
    controls: int = 1
    protocol: Literal["native", "inline_fence"] | None = None  # None: the model's usual one (agent.probe)
    cache_rung: bool = False
    max_tokens: int = 32

    @property
    def sessions(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class ReplayTask:
    name: str
    models: tuple[str, ...]
    sessions: tuple[str, ...]
    kind: Literal["replay"] = "replay"


@dataclass(frozen=True)
class LiveTask:
    name: str
    models: tuple[str, ...]
    session: str
    directives: tuple[str, ...] = ()  # texts to run as new turns after the session
    turns: tuple[int, ...] = ()  # recorded turns whose directive is run again (history up to it)
    repeats: int = 3
    require: int = 1
    expect: Expect = "answer"
    max_steps: int = 2
    max_tokens: int = 96
    kind: Literal["live"] = "live"

    @property
    def sessions(self) -> tuple[str, ...]:
        return (self.session,)


Task = ProbeTask | ReplayTask | LiveTask


@dataclass(frozen=True)
class FarmSpec:
    name: str
    models: tuple[ModelEntry, ...]
    sessions: tuple[SessionEntry, ...]
    tasks: tuple[Task, ...]
    source: Path | None = field(default=None, compare=False)

    def model(self, name: str) -> ModelEntry:
        return next(m for m in self.models if m.name == name)

    def session(self, name: str) -> SessionEntry:
        return next(s for s in self.sessions if s.name == name)

    def digest(self) -> str:
        """A digest of what the spec asks for (not where the file lies): the default run id's suffix."""
        body = {"name": self.name, "models": [asdict(m) for m in self.models],
                "sessions": [asdict(s) for s in self.sessions], "tasks": [asdict(t) for t in self.tasks]}
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def default_run_id(self) -> str:
        return f"{self.name}-{self.digest()[:12]}"


# ------------------------------------------------------------------ reading


def shared_root() -> Path:
    env = os.environ.get("VAK_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def load_farm_spec(path: str | os.PathLike[str]) -> FarmSpec:
    """Read and check the farm spec at ``path``."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FarmSpecError("no such file. Pass the path of a farm spec, e.g. farm/examples/small.toml.",
                            path=str(file)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise FarmSpecError(f"cannot read it ({exc}). Check its permissions and that it is UTF-8 text.",
                            path=str(file)) from exc
    return parse_farm_spec(text, path=file)


def parse_farm_spec(text: str, *, path: Path | None = None, base_dir: Path | None = None) -> FarmSpec:
    """Parse TOML text into a FarmSpec. Relative paths resolve against ``base_dir`` (default: the file's folder)."""
    where = str(path) if path else "<farm spec>"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))  # tomllib says where only in its message before 3.14
        line = int(found.group(1)) if found else None
        raise FarmSpecError(f"not valid TOML ({exc}). Fix the line it names.", path=where, line=line) from exc
    base = base_dir if base_dir is not None else (path.resolve().parent if path else Path.cwd())
    return _Parser(data, text, where, base).spec(path)


T = TypeVar("T")


class _Parser:
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
        named: tuple[tuple[str, list[str]], ...] = (
            ("models", [m.name for m in models]), ("sessions", [s.name for s in sessions]))
        for label, names in named:
            seen: set[str] = set()
            for i, item in enumerate(names):
                if item in seen:
                    raise self.fail(f"{item!r} is defined twice; names must be unique.", label, i, "name")
                seen.add(item)
        if not models:
            raise FarmSpecError("the spec defines no [[models]]; add at least one.", path=self.where, key="models")
        mnames = [m.name for m in models]
        snames = [s.name for s in sessions]
        tasks = tuple(self.task(t, i, mnames, snames) for i, t in enumerate(self.tables("tasks")))
        if not tasks:
            raise FarmSpecError("the spec defines no [[tasks]]; add a probe, replay or live task.",
                                path=self.where, key="tasks")
        tseen: set[str] = set()
        for i, task in enumerate(tasks):
            if task.name in tseen:
                raise self.fail(f"{task.name!r} is defined twice; task names must be unique.", "tasks", i, "name")
            tseen.add(task.name)
        return FarmSpec(name=name, models=models, sessions=sessions, tasks=tasks, source=source)

    def model(self, t: dict[str, Any], i: int) -> ModelEntry:
        tn = "models"
        name = self.name(t, tn, i, "model")
        kind = self.get(t, tn, i, "kind", str, "local")
        if kind not in MODEL_KINDS:
            raise self.fail(f"{kind!r} is not one of {list(MODEL_KINDS)}.", tn, i, "kind")
        common = {"name", "kind", "window", "horizon", "output_reserve", "tokens_per_char"}
        per_kind = {"local": {"model", "n_ctx", "threads", "n_parallel", "resource"},
                    "endpoint": {"model", "base_url", "api_key_env"}, "hosted": {"spec"}}
        self.check_keys(t, tn, i, common | per_kind[kind])
        fields: dict[str, Any] = {
            "window": self.optional_int(t, tn, i, "window", 256, 10_000_000),
            "horizon": self.optional_int(t, tn, i, "horizon", 256, 10_000_000),
            "output_reserve": self.get(t, tn, i, "output_reserve", int, 512, low=16, high=200_000),
            "tokens_per_char": self.get(t, tn, i, "tokens_per_char", float, 0.25, low=0.01, high=4.0),
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
            from providers.registry import parse_spec
            from vak.errors import InvalidInput

            try:
                parse_spec(spec)
            except InvalidInput as exc:
                raise self.fail(str(exc), tn, i, "spec") from exc
            fields["spec"] = spec
        return ModelEntry(name=name, kind=kind, **fields)  # type: ignore[arg-type]

    def session(self, t: dict[str, Any], i: int) -> SessionEntry:
        tn = "sessions"
        name = self.name(t, tn, i, "session")
        kind = self.get(t, tn, i, "kind", str, "recording")
        if kind not in SESSION_KINDS:
            raise self.fail(f"{kind!r} is not one of {list(SESSION_KINDS)}.", tn, i, "kind")
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
        name = self.name(t, tn, i, "task")
        kind = self.get(t, tn, i, "kind", str, "")
        if kind not in TASK_KINDS:
            raise self.fail(f"kind {kind!r} is not one of {list(TASK_KINDS)}.", tn, i, "kind")
        ms = self.names(t, tn, i, "models", models)
        if kind == "probe":
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
        if kind == "replay":
            self.check_keys(t, tn, i, {"name", "kind", "models", "sessions"})
            ss = self.names(t, tn, i, "sessions", sessions)
            if not (ss or sessions):
                raise self.fail("a replay needs sessions: add [[sessions]] to the spec.", tn, i)
            return ReplayTask(name=name, models=ms, sessions=ss)
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
