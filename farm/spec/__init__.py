"""The farm spec: one TOML file naming the models, the sessions and the tasks of an eval farm.

``load_farm_spec(path)`` reads it into frozen, typed objects (``FarmSpec``); anything wrong is a
``FarmSpecError`` naming the file, the line, the key and the fix. Every name (farm, model, session,
task) becomes a path component of the run folder, so each is checked with ``vak_context.names.check_name``.

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
    kind = "probe"                       # probe | replay | live | bfcl
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

    [[tasks]]
    name = "bfcl"
    kind = "bfcl"                        # BFCL v4 multi-turn: one unit per (model, category)
    models = ["box"]                     # models that speak OpenAI chat completions (local or endpoint)
    categories = ["multi_turn_base"]     # default: multi_turn_base and multi_turn_long_context
    entries = 200                        # the first N entries of each (200: the whole category)
    modes = ["direct", "engine"]         # default: both, reported side by side
    # window: the engine's window (default: the model's declared window); max_tokens = 1024

    [[tasks]]
    name = "history"
    kind = "bfcl_history"                # BFCL single-turn after K tokens of recorded history: a unit per
    models = ["qwen15"]                  # (model, category); the model probed first unless it has a horizon
    categories = ["simple_python"]       # default: simple_python, multiple, parallel
    entries = 20                         # the first N of each, the same at every size
    sizes = [0, 2000, 4000, 6000, 7500]  # K, history tokens before the question (the default)
    # modes = ["direct", "engine"]; history = "shared:data/trajectories/..." (default: the tau-bench
    # airline sessions one after another); select; window (default: the model's n_ctx); max_tokens = 512

    [[tasks]]
    name = "degrade"
    kind = "bfcl_degrade"                # BFCL v4 multi-turn against the scripted model that degrades past T
    thresholds = [4096, 8192, 16384]     # a unit per (T, category), and the perfect model's (perfect = true);
    entries = 200                        # the spec's models play no part: the model is the scripted one

Relative paths resolve against the spec file's folder; ``shared:REST`` resolves against the shared data
folder (``$VAK_SHARED``, else ``../shared`` next to the checkout).

The typed objects are in ``vak_context.farm.spec.entries`` and the checks in ``vak_context.farm.spec.parse``; this
module re-exports the objects.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from vak_context.errors import FarmSpecError
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
    Expect,
    FarmSpec,
    LiveTask,
    ModelEntry,
    ModelKind,
    ProbeTask,
    ReplayTask,
    SessionEntry,
    SessionKind,
    Task,
    shared_root,
)
from vak_context.farm.spec.parse import SpecParser

__all__ = [
    "BFCL_HISTORY_SIZES", "BFCL_MODES", "BFCL_THRESHOLDS", "EXPECTS", "MODEL_KINDS", "QUICK_PROBE", "SESSION_KINDS", "SHARED_PREFIX", "TASK_KINDS", "BfclDegradeTask", "BfclHistoryTask", "BfclTask",
    "Expect", "FarmSpec",
    "LiveTask", "ModelEntry", "ModelKind", "ProbeTask", "ReplayTask", "SessionEntry", "SessionKind", "Task",
    "load_farm_spec", "parse_farm_spec", "shared_root",
]


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
    return SpecParser(data, text, where, base).spec(path)
