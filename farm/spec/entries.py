"""The farm spec's typed objects: models, sessions, tasks and the ``FarmSpec`` that holds them.

All frozen; ``vak_context.farm.spec.parse`` builds them from TOML and ``vak_context.farm.spec`` is the entry point
(its docstring is the file format's reference).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR

ModelKind = Literal["local", "endpoint", "hosted"]
SessionKind = Literal["recording", "ledger", "generated"]
Expect = Literal["card", "answer", "tool_call"]
BFCL_MODES: tuple[str, ...] = ("direct", "engine")  # vak_context.farm.bfcl.report.MODES
MODEL_KINDS: tuple[str, ...] = ("local", "endpoint", "hosted")
SESSION_KINDS: tuple[str, ...] = ("recording", "ledger", "generated")
TASK_KINDS: tuple[str, ...] = ("probe", "replay", "live", "bfcl", "bfcl_history", "bfcl_degrade")
BFCL_HISTORY_SIZES: tuple[int, ...] = (0, 2_000, 4_000, 6_000, 7_500)  # vak_context.farm.bfcl.history.SIZES
BFCL_THRESHOLDS: tuple[int, ...] = (4_096, 8_192, 16_384)  # vak_context.farm.bfcl.degrade.THRESHOLDS
EXPECTS: tuple[str, ...] = ("card", "answer", "tool_call")
REPO = Path(__file__).resolve().parents[2]  # farm/spec/entries.py: the repository root
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
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR

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
    protocol: Literal["native", "inline_fence"] | None = None  # None: the model's usual one (vak_context.agent.probe)
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


@dataclass(frozen=True)
class BfclTask:
    """BFCL v4 multi-turn (vak_context.farm.bfcl.multiturn): one unit per (model, category), each entry in every mode."""

    name: str
    models: tuple[str, ...]
    categories: tuple[str, ...]  # default: every multi-turn category (vak_context.farm.bfcl.multiturn.CATEGORIES)
    entries: int = 200  # the first N entry ids of each category (fixed, so runs compare); 200 is a whole one
    modes: tuple[str, ...] = BFCL_MODES
    window: int | None = None  # the engine's window (default: the model's declared window)
    max_tokens: int = 1024
    kind: Literal["bfcl"] = "bfcl"

    @property
    def sessions(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class BfclHistoryTask:
    """BFCL single-turn questions after K tokens of recorded history (vak_context.farm.bfcl.history): one unit
    per (model, category), every size and mode in it, the model probed first unless the spec gives its horizon."""

    name: str
    models: tuple[str, ...]
    categories: tuple[str, ...]  # default: simple_python, multiple, parallel (vak_context.farm.bfcl.single)
    entries: int = 20  # the first N entries of each category, the same at every size
    sizes: tuple[int, ...] = BFCL_HISTORY_SIZES  # K: history tokens (stated count) before each question
    modes: tuple[str, ...] = BFCL_MODES
    history: Path | None = None  # a recorded-session file (default: the shared tau-bench airline sessions)
    select: str = ""  # only its recordings whose name ends so
    window: int | None = None  # the engine's window and the probe's (default: the model's n_ctx / window)
    max_tokens: int = 512
    kind: Literal["bfcl_history"] = "bfcl_history"

    @property
    def sessions(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class BfclDegradeTask:
    """BFCL v4 multi-turn against the scripted model that degrades past T (vak_context.farm.bfcl.degrade): one
    unit per (T, category), plus the perfect model's (no T) where ``perfect``; the spec's models play no part."""

    name: str
    categories: tuple[str, ...]  # default: multi_turn_base and multi_turn_long_context
    entries: int = 200
    thresholds: tuple[int, ...] = BFCL_THRESHOLDS
    modes: tuple[str, ...] = BFCL_MODES
    perfect: bool = True
    kind: Literal["bfcl_degrade"] = "bfcl_degrade"

    @property
    def models(self) -> tuple[str, ...]:
        return ()

    @property
    def sessions(self) -> tuple[str, ...]:
        return ()

    def unit_models(self) -> tuple[tuple[str, int | None], ...]:
        """The scripted model of each unit: its name in the results (``degrading-T``, ``perfect``) and T."""
        return (*((f"degrading-{t}", t) for t in self.thresholds), *((("perfect", None),) if self.perfect else ()))


Task = ProbeTask | ReplayTask | LiveTask | BfclTask | BfclHistoryTask | BfclDegradeTask


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



def shared_root() -> Path:
    env = os.environ.get("VAK_SHARED")
    return Path(env) if env else REPO.parent / "shared"
